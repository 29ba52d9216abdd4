package exceptions

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func newException(name string, rules []string, ns, obj *metav1.LabelSelector, expires *time.Time) *shepherdv1alpha1.PolicyException {
	p := &shepherdv1alpha1.PolicyException{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Rules, p.Spec.NamespaceSelector, p.Spec.ObjectSelector = rules, ns, obj
	if expires != nil {
		p.Spec.Expires = &metav1.Time{Time: *expires}
	}
	return p
}

func at(d time.Duration) *time.Time { t := t0.Add(d); return &t }

func TestExempt(t *testing.T) {
	teamA := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	legacy := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "legacy", Operator: metav1.LabelSelectorOpExists}}}
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{
		newException("z-late", []string{"V-TJ-1"}, nil, nil, at(time.Hour)),
		newException("a-team", []string{"V-TJ-1", "my-policy"}, teamA, nil, at(time.Minute)),
		newException("legacy", []string{"V-JS-1"}, nil, legacy, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	inTeamA := Object{Namespaced: true, NamespaceKnown: true, NamespaceLabels: map[string]string{"team": "a"}}
	inTeamB := Object{Namespaced: true, NamespaceKnown: true, NamespaceLabels: map[string]string{"team": "b"}}
	for _, tc := range []struct {
		name string
		rule string
		obj  Object
		now  time.Time
		want string // the exempting exception, "" none
	}{
		{"first by name wins", "V-TJ-1", inTeamA, t0, "a-team"},
		{"other namespace: the unselective one", "V-TJ-1", inTeamB, t0, "z-late"},
		{"after the first expires, the next", "V-TJ-1", inTeamA, t0.Add(time.Minute), "z-late"},
		{"expired exempts nothing, at its expiry", "V-TJ-1", inTeamA, t0.Add(time.Hour), ""},
		{"a policy by name", "my-policy", inTeamA, t0, "a-team"},
		{"a rule no exception names", "V-TJ-2", inTeamA, t0, ""},
		{"namespace unknown", "my-policy", Object{Namespaced: true}, t0, ""},
		{"cluster-scoped object and a namespaceSelector", "my-policy", Object{}, t0, ""},
		{"object selector", "V-JS-1", Object{Labels: map[string]string{"legacy": "yes"}}, t0, "legacy"},
		{"object selector misses", "V-JS-1", Object{Labels: map[string]string{"new": "yes"}}, t0, ""},
		{"the stored object's labels count", "V-JS-1", Object{Labels: map[string]string{}, OldLabels: map[string]string{"legacy": ""}}, t0, "legacy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := set.Exempt(tc.rule, tc.obj, tc.now)
			if got := e.Exception; got != tc.want || ok != (tc.want != "") {
				t.Errorf("Exempt(%s) = %q, %v; want %q", tc.rule, got, ok, tc.want)
			}
		})
	}
	if next, ok := set.NextExpiry(t0); !ok || !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("NextExpiry = %v, %v; want %v", next, ok, t0.Add(time.Minute))
	}
	if _, ok := set.NextExpiry(t0.Add(time.Hour)); ok {
		t.Error("NextExpiry after every expiry: want none")
	}
}

func TestNewSetNamesBadSelectors(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{
		newException("good", []string{"V-TJ-1"}, nil, nil, nil),
		newException("broken", []string{"V-TJ-1"}, bad, nil, nil),
	})
	if err == nil || !strings.Contains(err.Error(), "PolicyException broken") || !strings.Contains(err.Error(), "spec.namespaceSelector") {
		t.Errorf("error = %v; want one naming PolicyException broken and spec.namespaceSelector", err)
	}
	if set.Len() != 1 {
		t.Errorf("Len = %d; want the good exception alone", set.Len())
	}
}

func TestValidateUnknownRules(t *testing.T) {
	p := newException("x", []string{"V-TJ-1", "V-NOPE-9"}, nil, nil, nil)
	errs := Validate(p, func(r string) bool { return r == "V-TJ-1" })
	var got []string
	for _, e := range errs {
		got = append(got, e.Field+"="+e.BadValue.(string))
	}
	if diff := cmp.Diff([]string{"spec.rules[1]=V-NOPE-9"}, got); diff != "" {
		t.Errorf("Validate (-want +got):\n%s", diff)
	}
}

func TestSelectorCEL(t *testing.T) {
	sel := &metav1.LabelSelector{
		MatchLabels: map[string]string{"b": "2", "a": "1"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"prod"}},
			{Key: "x.io/gone", Operator: metav1.LabelSelectorOpDoesNotExist},
		},
	}
	want := "(object.metadata.?labels[?'a'] == optional.of('1') && object.metadata.?labels[?'b'] == optional.of('2') && " +
		"!(object.metadata.?labels[?'env'].hasValue() && object.metadata.?labels[?'env'].value() in ['prod']) && " +
		"!object.metadata.?labels[?'x.io/gone'].hasValue())"
	if diff := cmp.Diff(want, selectorCEL(sel, "object")); diff != "" {
		t.Errorf("selectorCEL (-want +got):\n%s", diff)
	}
	if got := selectorCEL(&metav1.LabelSelector{}, "object"); got != "true" {
		t.Errorf("empty selector = %q; want true", got)
	}
}

// TestExemptAndRestoreRoundTrip: rewriting an exported policy twice gives
// the same policy as once, and restoring it gives the export back; an
// exception that names another rule leaves it as it is.
func TestExemptAndRestoreRoundTrip(t *testing.T) {
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{
		newException("x", []string{"V-TJ-1"}, nil, &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, at(time.Hour)),
	})
	if err != nil {
		t.Fatal(err)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shepherd-v-tj-1", Annotations: map[string]string{"keep": "me"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Variables:   []admissionregistrationv1.Variable{{Name: "v", Expression: "1"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.x > variables.v"}},
		},
	}
	orig := vap.DeepCopy()
	if set.RuleOf(vap.Name) != "V-TJ-1" {
		t.Fatalf("RuleOf(%s) = %q", vap.Name, set.RuleOf(vap.Name))
	}
	if !set.ExemptVAP("V-TJ-1", vap, t0) {
		t.Fatal("ExemptVAP did not exempt")
	}
	once := vap.DeepCopy()
	set.ExemptVAP("V-TJ-1", vap, t0)
	if diff := cmp.Diff(once, vap); diff != "" {
		t.Errorf("rewritten twice differs from once (-once +twice):\n%s", diff)
	}
	if once.Spec.Validations[0].Expression != "variables.shepherd_exempt || (object.spec.x > variables.v)" || once.Spec.Variables[0].Name != Variable ||
		once.Annotations[AnnotationExpires] != "2026-11-27T13:00:00Z" {
		t.Errorf("rewritten policy %+v", once)
	}
	if !UnexemptVAP(vap) {
		t.Error("UnexemptVAP found nothing to restore")
	}
	if diff := cmp.Diff(orig, vap); diff != "" {
		t.Errorf("restored differs from the export (-export +restored):\n%s", diff)
	}
	if set.ExemptVAP("V-TJ-1", vap, t0.Add(time.Hour)) || !cmp.Equal(orig, vap) {
		t.Errorf("after the expiry the policy is rewritten: %+v", vap)
	}

	mp := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shepherd-d-pcs-1"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{Mutations: []admissionregistrationv1.Mutation{{
			PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[JSONPatch{op: 'add', path: '/x', value: 1}]"},
		}}},
	}
	origMAP := mp.DeepCopy()
	if ok, err := set.ExemptMAP("D-PCS-1", mp, t0); ok || err != nil || !cmp.Equal(origMAP, mp) {
		t.Errorf("an exception of another rule rewrote the MAP: %v, %v, %+v", ok, err, mp)
	}
	set2, _ := NewSet([]*shepherdv1alpha1.PolicyException{newException("y", []string{"D-PCS-1"}, nil, nil, nil)})
	if ok, err := set2.ExemptMAP("D-PCS-1", mp, t0); !ok || err != nil || mp.Spec.Mutations[0].JSONPatch.Expression != "([JSONPatch{op: 'add', path: '/x', value: 1}]).filter(p, !variables.shepherd_exempt)" {
		t.Errorf("ExemptMAP: %v, %v, %q", ok, err, mp.Spec.Mutations[0].JSONPatch.Expression)
	}
	UnexemptMAP(mp)
	if diff := cmp.Diff(origMAP, mp); diff != "" {
		t.Errorf("restored MAP differs (-export +restored):\n%s", diff)
	}
}
