package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNativeRunsOnlyWhatPoliciesCannot: in native mode the chain leaves
// the CEL rules, the WorkloadPolicies and the exportable defaults to the
// apiserver's policies, and still runs the lookups (V-TJ-3 here); switched
// back, it runs everything again.
func TestNativeRunsOnlyWhatPoliciesCannot(t *testing.T) {
	c, err := NewChain(ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.SetPolicy(policy("short-research", "1", "object.spec.activeDeadlineSeconds <= 86400")); len(errs) > 0 {
		t.Fatal(errs)
	}
	ctx := context.Background()
	tj := &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: trainJob(0)}
	pcs := &Request{Operation: admissionv1.Create, Namespace: "ns", Name: "pcs",
		Kind:   metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"},
		Object: []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"pcs","namespace":"ns"},"spec":{"replicas":1,"template":{"cliques":[{"name":"w","spec":{"roleName":"w","replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)}
	rules := func(v *Verdict) map[string]bool {
		out := map[string]bool{}
		for _, viol := range v.Violations {
			out[viol.Rule] = true
		}
		return out
	}

	webhookMode := rules(c.Validate(ctx, tj))
	if !webhookMode["V-TJ-1"] || !webhookMode["V-TJ-3"] {
		t.Fatalf("webhook mode: violations %v, want V-TJ-1 and V-TJ-3", webhookMode)
	}
	if d := c.Default(ctx, pcs); len(d.Patch) == 0 {
		t.Fatal("webhook mode: the PodCliqueSet was not defaulted")
	}

	c.SetNative(true)
	if got := rules(c.Validate(ctx, tj)); len(got) != 1 || !got["V-TJ-3"] {
		t.Errorf("native mode: violations %v, want only the lookup V-TJ-3", got)
	}
	if d := c.Default(ctx, pcs); len(d.Patch) != 0 {
		t.Errorf("native mode: the PodCliqueSet was defaulted (%v); the MutatingAdmissionPolicies do that", d.Patch)
	}

	c.SetNative(false)
	if got := rules(c.Validate(ctx, tj)); len(got) != len(webhookMode) {
		t.Errorf("back in webhook mode: violations %v, want %v", got, webhookMode)
	}
}
