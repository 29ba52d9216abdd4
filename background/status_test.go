package background

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

func TestStatusPatch(t *testing.T) {
	now := metav1.NewTime(t0)
	res := &Results{Rules: map[string]*RuleResult{"p": {Objects: 2, Samples: []Sample{
		{ObjectRef: ObjectRef{APIVersion: "v", Kind: "TrainJob", Namespace: "ns", Name: "a"}, Field: "spec.x", Message: "m"},
	}}}}
	sample := []shepherdv1alpha1.ViolationSample{{APIVersion: "v", Kind: "TrainJob", Namespace: "ns", Name: "a", Field: "spec.x", Message: "m"}}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Compiled", ObservedGeneration: 3}
	pol := func(name string, st shepherdv1alpha1.WorkloadPolicyStatus) *shepherdv1alpha1.WorkloadPolicy {
		p := &shepherdv1alpha1.WorkloadPolicy{}
		p.Name, p.Generation, p.Status = name, 4, st
		p.Status.Conditions = []metav1.Condition{ready}
		return p
	}
	written := shepherdv1alpha1.WorkloadPolicyStatus{Violations: ptr.To[int32](2), ViolationSamples: sample, AuditedGeneration: 3, LastAuditTime: &now}
	for _, tc := range []struct {
		name              string
		p                 *shepherdv1alpha1.WorkloadPolicy
		enforced, refresh bool
		want              string // "" for no patch
	}{
		{"first audit", pol("p", shepherdv1alpha1.WorkloadPolicyStatus{}), true, false,
			`{"status":{"violations":2,"violationSamples":[{"apiVersion":"v","kind":"TrainJob","namespace":"ns","name":"a","field":"spec.x","message":"m"}],"auditedGeneration":3,"lastAuditTime":"2026-11-24T12:00:00Z"}}`},
		{"unchanged", pol("p", written), true, false, ""},
		{"unchanged, interval pass", pol("p", written), true, true,
			`{"status":{"violations":2,"violationSamples":[{"apiVersion":"v","kind":"TrainJob","namespace":"ns","name":"a","field":"spec.x","message":"m"}],"auditedGeneration":3,"lastAuditTime":"2026-11-24T12:00:00Z"}}`},
		{"no violations is 0", pol("q", shepherdv1alpha1.WorkloadPolicyStatus{}), true, false,
			`{"status":{"violations":0,"violationSamples":null,"auditedGeneration":3,"lastAuditTime":"2026-11-24T12:00:00Z"}}`},
		{"not enforced: cleared", pol("p", written), false, false,
			`{"status":{"violations":null,"violationSamples":null,"auditedGeneration":null,"lastAuditTime":null}}`},
		{"not enforced, nothing to clear", pol("p", shepherdv1alpha1.WorkloadPolicyStatus{}), false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, needed, err := StatusPatch(tc.p, res, tc.enforced, tc.refresh, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); needed != (tc.want != "") || got != tc.want {
				t.Errorf("patch %t %s\nwant %s", needed, got, tc.want)
			}
		})
	}
}
