package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// TestExceptionExemptsOneObjectUntilItExpires: a PolicyException for
// the research namespace's TrainJobs labelled legacy turns their denial by
// the policy into an Exempt record (allowed, with a warning naming the
// exception), leaves every other object denied, and stops at its expiry
// without being set again.
func TestExceptionExemptsOneObjectUntilItExpires(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"team": "research"}}}
	c, err := NewChain(ChainOptions{Rules: celrulesConfig("V-TJ-3"), Clock: clk, Lookups: NewObjectLookups([]runtime.Object{ns}, true)})
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.SetPolicy(policy("research-deadlines", "1", "object.spec.?activeDeadlineSeconds.orValue(0) <= 86400")); len(errs) > 0 {
		t.Fatalf("SetPolicy: %v", errs)
	}
	expires := metav1.NewTime(now.Add(time.Hour))
	set, err := exceptions.NewSet([]*shepherdv1alpha1.PolicyException{{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-research"},
		Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:             []string{"research-deadlines"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "research"}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "true"}},
			Expires:           &expires,
			Reason:            "migrating by December",
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	before := c.RuleSetVersion()
	c.SetExceptions(set)
	if c.RuleSetVersion() == before {
		t.Error("RuleSetVersion did not change with the exceptions: the background audit would not judge again")
	}
	legacy := []byte(strings.Replace(string(trainJob(100000)), `"team":"research"`, `"team":"research","legacy":"true"`, 1))
	admit := func(obj []byte) *Verdict {
		return c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: obj})
	}

	v := admit(legacy)
	if !v.Allowed || len(ruleViolations(v, "research-deadlines")) != 0 {
		t.Fatalf("exempt object: allowed %v, violations %+v; want allowed with none", v.Allowed, v.Violations)
	}
	want := []ExemptViolation{{
		Violation: Violation{Rule: "research-deadlines", Field: "spec.activeDeadlineSeconds", Action: ActionDeny, Reason: "FieldValueInvalid",
			Message: "research TrainJobs must set activeDeadlineSeconds of at most one day (shepherd research-deadlines)"},
		Exemption: exceptions.Exemption{Exception: "legacy-research", Expires: &expires.Time, Reason: "migrating by December"},
	}}
	if diff := cmp.Diff(want, v.Exempted); diff != "" {
		t.Errorf("Exempted (-want +got):\n%s", diff)
	}
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "exempt by PolicyException legacy-research (until 2026-11-27T13:00:00Z)") {
		t.Errorf("warnings %q; want one naming the exception and its expiry", v.Warnings)
	}

	if v := admit(trainJob(100000)); v.Allowed || len(v.Exempted) != 0 {
		t.Errorf("an object the exception does not select: allowed %v, exempted %+v; want denied", v.Allowed, v.Exempted)
	}
	c.DeletePolicy("research-deadlines")
	if v := admit(legacy); !v.Allowed || len(v.Exempted) != 0 {
		t.Errorf("no violation, nothing exempt: allowed %v, exempted %+v", v.Allowed, v.Exempted)
	}
	if errs := c.SetPolicy(policy("research-deadlines", "2", "object.spec.?activeDeadlineSeconds.orValue(0) <= 86400")); len(errs) > 0 {
		t.Fatalf("SetPolicy: %v", errs)
	}

	clk.SetTime(expires.Time)
	if v := admit(legacy); v.Allowed || len(v.Exempted) != 0 || len(ruleViolations(v, "research-deadlines")) != 1 {
		t.Errorf("at the expiry: allowed %v, exempted %+v; want denied by research-deadlines", v.Allowed, v.Exempted)
	}
}

// TestExceptionSwitchesOffADefaulter: an exempt object is not defaulted by
// the defaulter named, and another object still is.
func TestExceptionSwitchesOffADefaulter(t *testing.T) {
	c := newChain(t)
	set, err := exceptions.NewSet([]*shepherdv1alpha1.PolicyException{{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-unset"},
		Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:          []string{"D-PCS-1"},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "true"}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetExceptions(set)
	pcs := func(labels string) []byte {
		return []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ns","labels":{` + labels + `}},"spec":{"replicas":1,"template":{"cliques":[]}}}`)
	}
	kind := metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	paths := func(obj []byte) []string {
		v := c.Default(context.Background(), &Request{Operation: admissionv1.Create, Kind: kind, Namespace: "ns", Object: obj})
		var out []string
		for _, op := range v.Patch {
			out = append(out, op.Path)
		}
		return out
	}
	// The workload type is spec.workloadType or an annotation, by the
	// CRDs' shape (the knob layer).
	if got := paths(pcs(`"legacy":"true"`)); strings.Contains(strings.ToLower(strings.Join(got, " ")), "workload") {
		t.Errorf("exempt PodCliqueSet was given a workload type: %v", got)
	}
	if got := paths(pcs(`"legacy":"false"`)); !strings.Contains(strings.ToLower(strings.Join(got, " ")), "workload") {
		t.Errorf("other PodCliqueSet was not given a workload type: %v", got)
	}
}
