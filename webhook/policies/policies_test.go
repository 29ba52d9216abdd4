package policies

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

var (
	t1 = metav1.NewTime(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	t2 = metav1.NewTime(t1.Add(time.Hour))
)

func policy(gen int64, conds ...metav1.Condition) *shepherdv1alpha1.WorkloadPolicy {
	p := &shepherdv1alpha1.WorkloadPolicy{}
	p.Name, p.UID, p.Generation = "p", "uid", gen
	p.Status.Conditions = conds
	return p
}

// audited gives p the figures of a background audit pass.
func audited(p *shepherdv1alpha1.WorkloadPolicy) *shepherdv1alpha1.WorkloadPolicy {
	p.Status.Violations = ptr.To[int32](3)
	p.Status.ViolationSamples = []shepherdv1alpha1.ViolationSample{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "a", Name: "x", Field: "spec", Message: "m"}}
	p.Status.AuditedGeneration = 1
	p.Status.LastAuditTime = &t1
	return p
}

func TestDesiredStatus(t *testing.T) {
	ready := metav1.Condition{Type: "Ready", Status: "True", Reason: "Compiled", Message: "the policy compiled and is enforced", ObservedGeneration: 1, LastTransitionTime: t1}
	errs := field.ErrorList{
		field.Invalid(field.NewPath("spec", "validations").Index(0).Child("expression"), "object.spec.nope", "undefined field 'nope'"),
		field.Required(field.NewPath("spec", "variables").Index(1).Child("expression"), "empty"),
	}
	for _, tc := range []struct {
		name string
		p    *shepherdv1alpha1.WorkloadPolicy
		errs field.ErrorList
		want shepherdv1alpha1.WorkloadPolicyStatus
	}{
		{"compiles", policy(1), nil, shepherdv1alpha1.WorkloadPolicyStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{ready}}},
		{"still compiles: transition time kept", policy(2, ready), nil, shepherdv1alpha1.WorkloadPolicyStatus{ObservedGeneration: 2, Conditions: []metav1.Condition{
			{Type: "Ready", Status: "True", Reason: "Compiled", Message: "the policy compiled and is enforced", ObservedGeneration: 2, LastTransitionTime: t1}}}},
		{"breaks", policy(2, ready), errs, shepherdv1alpha1.WorkloadPolicyStatus{
			ObservedGeneration: 2,
			Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "CompileError", ObservedGeneration: 2, LastTransitionTime: t2,
				Message: `the policy is not applied: 2 expression(s) failed to compile: spec.validations[0].expression: Invalid value: "object.spec.nope": undefined field 'nope'; spec.variables[1].expression: Required value: empty`}},
			CompileErrors: []shepherdv1alpha1.CompileError{
				{FieldPath: "spec.validations[0].expression", Message: `Invalid value: "object.spec.nope": undefined field 'nope'`},
				{FieldPath: "spec.variables[1].expression", Message: "Required value: empty"},
			},
		}},
		{"the audit's figures are carried over, compiled or not", audited(policy(2, ready)), errs[:1], shepherdv1alpha1.WorkloadPolicyStatus{
			ObservedGeneration: 2,
			Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "CompileError", ObservedGeneration: 2, LastTransitionTime: t2,
				Message: `the policy is not applied: 1 expression(s) failed to compile: spec.validations[0].expression: Invalid value: "object.spec.nope": undefined field 'nope'`}},
			CompileErrors:     []shepherdv1alpha1.CompileError{{FieldPath: "spec.validations[0].expression", Message: `Invalid value: "object.spec.nope": undefined field 'nope'`}},
			Violations:        ptr.To[int32](3),
			ViolationSamples:  []shepherdv1alpha1.ViolationSample{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "a", Name: "x", Field: "spec", Message: "m"}},
			AuditedGeneration: 1,
			LastAuditTime:     &t1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t1
			if len(tc.p.Status.Conditions) > 0 {
				now = t2
			}
			if diff := cmp.Diff(tc.want, DesiredStatus(tc.p, tc.errs, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fakeSink is the chain's policy store reduced to what it holds; the real
// chain is exercised by test/webhook.
type fakeSink struct {
	fail    bool
	set     int
	holding map[string]int64
}

func (f *fakeSink) SetPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	f.set++
	if f.fail {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), "", "broken")}
	}
	f.holding[p.Name] = p.Generation
	return nil
}

func (f *fakeSink) DeletePolicy(name string) { delete(f.holding, name) }

func TestLoadCompilesEachGenerationOnceAndDropsBrokenOnes(t *testing.T) {
	s := &fakeSink{holding: map[string]int64{}}
	r := &Reconciler{Sink: s}
	if errs := r.load(policy(1)).errs; len(errs) != 0 || s.holding["p"] != 1 {
		t.Fatalf("gen 1: %v, holding %v", errs, s.holding)
	}
	r.load(policy(1))
	if s.set != 1 {
		t.Errorf("a resync recompiled an unchanged generation: %d compiles", s.set)
	}
	s.fail = true
	if errs := r.load(policy(2)).errs; len(errs) != 1 {
		t.Fatalf("gen 2: want 1 error, got %v", errs)
	}
	if _, ok := s.holding["p"]; ok {
		t.Error("a policy whose new generation fails to compile is still enforced")
	}
	// A broken generation is retried on the next reconcile (a fix of the
	// chain's schemas, say), not remembered as done.
	r.load(policy(2))
	if s.set != 3 {
		t.Errorf("compiles = %d, want 3", s.set)
	}
	r.remove("p")
	if len(r.applied) != 0 {
		t.Errorf("applied after remove: %v", r.applied)
	}
}

func named(name string, gen int64) *shepherdv1alpha1.WorkloadPolicy {
	p := policy(gen)
	p.Name = name
	p.UID = types.UID("uid-" + name)
	return p
}

// Over --max-workload-policies a policy is held back, not compiled, with
// the outcome saying so; a generation of a policy already compiled still
// compiles (it replaces itself); once another is deleted, the held one
// compiles on its retry.
func TestPoliciesOverTheCapAreHeldBack(t *testing.T) {
	s := &fakeSink{holding: map[string]int64{}}
	r := &Reconciler{Sink: s, MaxPolicies: 2}
	for _, name := range []string{"a", "b"} {
		if a := r.load(named(name, 1)); !a.ok {
			t.Fatalf("%s: %+v", name, a)
		}
	}
	if a := r.load(named("c", 1)); a.ok || !a.overCap {
		t.Fatalf("c over the cap: %+v, want held back", a)
	}
	if _, ok := s.holding["c"]; ok || s.set != 2 {
		t.Errorf("c was compiled over the cap (%d compiles, holding %v)", s.set, s.holding)
	}
	if a := r.load(named("a", 2)); !a.ok {
		t.Errorf("a new generation of a compiled policy was held back: %+v", a)
	}
	r.remove("b")
	if a := r.load(named("c", 1)); !a.ok {
		t.Errorf("c after b's deletion: %+v, want compiled", a)
	}
	st := OverCapStatus(named("d", 1), 2, metav1.Now())
	if c := meta.FindStatusCondition(st.Conditions, api.ConditionPolicyReady); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != api.ReasonTooManyPolicies || !strings.Contains(c.Message, "--max-workload-policies") {
		t.Errorf("over-cap status condition %+v", c)
	}
}
