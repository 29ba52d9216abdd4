package exceptions

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// withLabels is a TrainJob-like object of n nodes; nil labels: none.
func withLabels(labels map[string]string, n int64) map[string]any {
	md := map[string]any{"name": "tj"}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		md["labels"] = l
	}
	return map[string]any{"metadata": md, "spec": map[string]any{"n": n}}
}

// TestExportedExemptionAgreesWithExempt: the CEL an exported
// ValidatingAdmissionPolicy is rewritten with exempts exactly the objects
// Set.Exempt exempts (the webhook's and `shepherd check`'s answer), and its
// audit annotation names the same exception and expiry with the failing
// validation's message. test/vap runs the same matrix through a real
// apiserver; here the CEL is evaluated directly.
func TestExportedExemptionAgreesWithExempt(t *testing.T) {
	t.Parallel()
	const rule = "small"
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{
		newException("a-legacy", []string{rule}, &metav1.LabelSelector{MatchLabels: map[string]string{"exempt": "yes"}},
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "legacy", Operator: metav1.LabelSelectorOpIn, Values: []string{"true", "yes"}}}},
			at(time.Hour)),
		newException("b-untiered", []string{rule}, nil,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}, {Key: "bench", Operator: metav1.LabelSelectorOpExists}}},
			nil),
		newException("c-expired", []string{rule}, nil, nil, at(-time.Minute)),
		newException("d-other-rule", []string{"V-TJ-1"}, nil, nil, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shepherd-policy-small"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.spec.n <= 4", Message: "at most 4 nodes"},
				{Expression: "object.spec.n % 2 == 0", Message: "an even 'number' of nodes"},
			},
		},
	}
	if !set.ExemptVAP(rule, vap, t0) {
		t.Fatal("ExemptVAP exempts nothing")
	}
	// Only the exceptions in force that name the rule, by name; the
	// earliest expiry of them.
	wantAnn := map[string]string{AnnotationExceptions: "a-legacy,b-untiered", AnnotationExpires: "2026-11-27T13:00:00Z"}
	if diff := cmp.Diff(wantAnn, vap.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if len(vap.Spec.AuditAnnotations) != 1 || vap.Spec.AuditAnnotations[0].Key != AuditKey {
		t.Fatalf("audit annotations %+v; want one %q", vap.Spec.AuditAnnotations, AuditKey)
	}
	exemptExpr, auditExpr := vap.Spec.Variables[0].Expression, vap.Spec.AuditAnnotations[0].ValueExpression

	exemptNS := map[string]string{"exempt": "yes"}
	for _, tc := range []struct {
		name      string
		ns        map[string]string // nil: cluster-scoped
		labels    map[string]string
		oldLabels map[string]string // not nil: an UPDATE
		n         int64
	}{
		{"exempt namespace, legacy=true", exemptNS, map[string]string{"legacy": "true"}, nil, 8},
		{"exempt namespace, legacy=yes and tiered", exemptNS, map[string]string{"legacy": "yes", "tier": "gold"}, nil, 8},
		{"exempt namespace, legacy=no", exemptNS, map[string]string{"legacy": "no"}, nil, 8},
		{"exempt namespace, no labels", exemptNS, nil, nil, 8},
		{"other namespace, legacy=true", map[string]string{}, map[string]string{"legacy": "true"}, nil, 8},
		{"other namespace, bench untiered", map[string]string{}, map[string]string{"bench": "1"}, nil, 8},
		{"other namespace, bench tiered", map[string]string{}, map[string]string{"bench": "1", "tier": "x"}, nil, 8},
		{"update removing the label, exempt namespace", exemptNS, map[string]string{"team": "a"}, map[string]string{"legacy": "true"}, 8},
		{"update removing the label, other namespace", map[string]string{}, map[string]string{"team": "a"}, map[string]string{"legacy": "true"}, 8},
		{"cluster-scoped, legacy=true", nil, map[string]string{"legacy": "true"}, nil, 8},
		{"cluster-scoped, bench", nil, map[string]string{"bench": ""}, nil, 8},
		{"exempt and the second validation fails", map[string]string{}, map[string]string{"bench": "1"}, nil, 3},
		{"exempt but valid: nothing to audit", exemptNS, map[string]string{"legacy": "true"}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]any{"object": withLabels(tc.labels, tc.n), "oldObject": nil, "namespaceObject": nil}
			o := Object{Labels: tc.labels, OldLabels: tc.oldLabels, Namespaced: tc.ns != nil, NamespaceKnown: tc.ns != nil, NamespaceLabels: tc.ns}
			if tc.oldLabels != nil {
				vars["oldObject"] = withLabels(tc.oldLabels, 2)
			}
			if tc.ns != nil {
				vars["namespaceObject"] = withLabels(tc.ns, 0)
			}
			want, wantOK := set.Exempt(rule, o, t0)
			got := testkit.EvalCEL(t, exemptExpr, vars).Value().(bool)
			if got != wantOK {
				t.Fatalf("exported exemption %v, Exempt %v (%+v)", got, wantOK, want)
			}
			vars["variables"] = map[string]any{Variable: got}
			value := testkit.EvalCEL(t, auditExpr, vars).Value().(string)
			violates := tc.n > 4 || tc.n%2 != 0
			if !wantOK || !violates {
				if value != "" {
					t.Errorf("audit annotation %q; want none (not exempt, or no violation)", value)
				}
				return
			}
			e, msg, ok := ParseAudit(value)
			wantMsg := "at most 4 nodes"
			if tc.n <= 4 {
				wantMsg = "an even 'number' of nodes"
			}
			if diff := cmp.Diff(want, e); diff != "" || !ok || msg != wantMsg {
				t.Errorf("ParseAudit(%q) = %v, message %q (want %q); exemption (-Exempt +audit):\n%s", value, ok, msg, wantMsg, diff)
			}
		})
	}
}

func TestParseAudit(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in      string
		want    Exemption
		wantMsg string
		ok      bool
	}{
		{"legacy\n2026-11-27T13:00:00Z\nat most 4 nodes", Exemption{Exception: "legacy", Expires: &until}, "at most 4 nodes", true},
		{"legacy\n\nat most 4 nodes", Exemption{Exception: "legacy"}, "at most 4 nodes", true},
		// The message may hold newlines of its own: only the first two
		// lines are the exception's.
		{"legacy\n\none\ntwo", Exemption{Exception: "legacy"}, "one\ntwo", true},
		{"legacy\nsoon\nm", Exemption{Exception: "legacy"}, "m", true},
		{"legacy", Exemption{}, "", false},
		{"\n2026-11-27T13:00:00Z\nm", Exemption{}, "", false},
		{"", Exemption{}, "", false},
	} {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			t.Parallel()
			e, msg, ok := ParseAudit(tc.in)
			if diff := cmp.Diff(tc.want, e); diff != "" || msg != tc.wantMsg || ok != tc.ok {
				t.Errorf("message %q, ok %v; want %q, %v; exemption (-want +got):\n%s", msg, ok, tc.wantMsg, tc.ok, diff)
			}
		})
	}
}

func TestExemptMAPRefusesOtherPatches(t *testing.T) {
	t.Parallel()
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{newException("x", []string{"D-PCS-1"}, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []admissionregistrationv1.Mutation{
		{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"}},
		{PatchType: admissionregistrationv1.PatchTypeJSONPatch},
	} {
		t.Run(string(m.PatchType), func(t *testing.T) {
			t.Parallel()
			mp := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shepherd-d-pcs-1"},
				Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{Mutations: []admissionregistrationv1.Mutation{
					{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[]"}}, m}}}
			ok, err := set.ExemptMAP("D-PCS-1", mp, t0)
			want := "MutatingAdmissionPolicy shepherd-d-pcs-1: mutation 1 is not a JSON patch"
			if ok || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ExemptMAP = %v, %v; want an error containing %q", ok, err, want)
			}
		})
	}
}

func TestRuleOf(t *testing.T) {
	t.Parallel()
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{newException("x", []string{"V-PCS-4", "max-day"}, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ policy, want string }{
		{"shepherd-v-pcs-4", "V-PCS-4"},
		{"shepherd-policy-max-day", "max-day"},
		{"shepherd-v-pcs-7", ""},        // a rule no exception names
		{"shepherd-policy-v-pcs-4", ""}, // a built-in ID is not a policy's export
		{"max-day", ""},                 // the bare name is no export
	} {
		if got := set.RuleOf(tc.policy); got != tc.want {
			t.Errorf("RuleOf(%s) = %q, want %q", tc.policy, got, tc.want)
		}
	}
	if got := (*Set)(nil).RuleOf("shepherd-v-pcs-4"); got != "" {
		t.Errorf("nil set: RuleOf = %q", got)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	bad := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "not a value!"}}
	for _, tc := range []struct {
		name string
		p    *shepherdv1alpha1.PolicyException
		want []string // type and field of each error
	}{
		{"valid, rules not checked without known", newException("x", []string{"anything"}, nil, nil, nil), nil},
		{"no rules", newException("x", nil, nil, nil, nil), []string{"FieldValueRequired spec.rules"}},
		{"an empty rule", newException("x", []string{"V-TJ-1", ""}, nil, nil, nil), []string{"FieldValueInvalid spec.rules[1]"}},
		{"a bad object selector", newException("x", []string{"V-TJ-1"}, nil, bad, nil), []string{"FieldValueInvalid spec.objectSelector.matchLabels"}},
		{"both selectors bad", newException("x", []string{"V-TJ-1"}, bad, bad, nil), []string{"FieldValueInvalid spec.namespaceSelector.matchLabels", "FieldValueInvalid spec.objectSelector.matchLabels"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, e := range Validate(tc.p, nil) {
				got = append(got, string(e.Type)+" "+e.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNamesAndLen(t *testing.T) {
	t.Parallel()
	set, err := NewSet([]*shepherdv1alpha1.PolicyException{
		newException("soon", []string{"V-TJ-1"}, nil, nil, at(time.Minute)),
		newException("ns-only", []string{"V-JS-1"}, &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}, nil, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		now  time.Time
		want bool
	}{
		{"V-TJ-1", t0, true},
		{"V-TJ-1", t0.Add(time.Minute), false}, // expired at its expiry
		{"V-JS-1", t0.Add(24 * time.Hour), true},
		{"V-TJ-2", t0, false},
	} {
		if got := set.Names(tc.rule, tc.now); got != tc.want {
			t.Errorf("Names(%s, %v) = %v, want %v", tc.rule, tc.now, got, tc.want)
		}
	}
	// Expired ones still count: Len is what was loaded.
	if set.Len() != 2 || (*Set)(nil).Len() != 0 || (*Set)(nil).Names("V-TJ-1", t0) {
		t.Errorf("Len = %d; nil set: Len %d, Names %v", set.Len(), (*Set)(nil).Len(), (*Set)(nil).Names("V-TJ-1", t0))
	}
	if e, ok := (*Set)(nil).Exempt("V-TJ-1", Object{}, t0); ok {
		t.Errorf("nil set exempts: %+v", e)
	}
}

func TestUntil(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 11, 27, 14, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		e    Exemption
		want string
	}{
		{Exemption{Exception: "x"}, "no expiry"},
		{Exemption{Exception: "x", Expires: &local}, "until 2026-11-27T13:00:00Z"},
	} {
		if got := tc.e.Until(); got != tc.want {
			t.Errorf("Until = %q, want %q", got, tc.want)
		}
	}
}
