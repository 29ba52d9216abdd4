package webhook

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUpdatesThatChangeNothingJudgedAreNotJudged: a stored TrainJob that
// breaks built-in rules and a lookup (V-TJ-3: its runtime is gone) may
// still lose a finalizer; an UPDATE of its spec is judged. A stored PodCliqueSet never defaulted is not defaulted by a
// finalizer UPDATE (the exported MutatingAdmissionPolicies skip it too).
func TestUpdatesThatChangeNothingJudgedAreNotJudged(t *testing.T) {
	c, err := NewChain(ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	withFinalizer := func(raw []byte) []byte {
		var o map[string]any
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		o["metadata"].(map[string]any)["finalizers"] = []any{"example.com/cleanup"}
		out, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rules := func(v *Verdict) map[string]bool {
		out := map[string]bool{}
		for _, viol := range v.Violations {
			out[viol.Rule] = true
		}
		return out
	}

	stored := trainJob(0)
	created := rules(c.Validate(ctx, &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: stored}))
	if !created["V-TJ-1"] || !created["V-TJ-3"] {
		t.Fatalf("CREATE: violations %v, want V-TJ-1 and V-TJ-3", created)
	}
	finalizer := &Request{Operation: admissionv1.Update, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: withFinalizer(stored), OldObject: stored}
	if v := c.Validate(ctx, finalizer); len(v.Violations) > 0 || !v.Allowed {
		t.Errorf("a finalizer UPDATE: allowed %v, violations %v; want it admitted unjudged", v.Allowed, rules(v))
	}
	specChange := &Request{Operation: admissionv1.Update, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: trainJob(7), OldObject: stored}
	// V-TJ-2: activeDeadlineSeconds is immutable once set.
	if got := rules(c.Validate(ctx, specChange)); !got["V-TJ-2"] {
		t.Errorf("a spec UPDATE: violations %v, want V-TJ-2: it is judged", got)
	}

	pcsKind := metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	pcs := []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"pcs","namespace":"ns"},"spec":{"replicas":1,"template":{"cliques":[{"name":"w","spec":{"roleName":"w","replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
	if d := c.Default(ctx, &Request{Operation: admissionv1.Create, Kind: pcsKind, Namespace: "ns", Name: "pcs", Object: pcs}); len(d.Patch) == 0 {
		t.Fatal("CREATE: the PodCliqueSet was not defaulted")
	}
	if d := c.Default(ctx, &Request{Operation: admissionv1.Update, Kind: pcsKind, Namespace: "ns", Name: "pcs", Object: withFinalizer(pcs), OldObject: pcs}); len(d.Patch) != 0 {
		t.Errorf("a finalizer UPDATE was defaulted: %v", d.Patch)
	}
}

// TestGoChecksSkipUpdatesThatChangeNothingTheyRead: V-TR-7 (a lookup of
// what the cluster serves, run on UPDATE too) judges a runtime whose labels
// change, not one whose finalizers do.
func TestGoChecksSkipUpdatesThatChangeNothingTheyRead(t *testing.T) {
	c, err := NewChain(ChainOptions{Lookups: NewObjectLookups(nil, false)})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := json.Marshal(workloadRuntimes(carrier)[1])
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(md map[string]any)) []byte {
		var o map[string]any
		if err := json.Unmarshal(stored, &o); err != nil {
			t.Fatal(err)
		}
		f(o["metadata"].(map[string]any))
		out, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	kind := metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainingRuntime"}
	judged := func(op admissionv1.Operation, obj, old []byte) bool {
		v := c.Validate(context.Background(), &Request{Operation: op, Kind: kind, Namespace: "ns", Name: "rt", Object: obj, OldObject: old})
		for _, viol := range v.Violations {
			if viol.Rule == "V-TR-7" {
				return true
			}
		}
		return false
	}
	if !judged(admissionv1.Create, stored, nil) {
		t.Fatal("CREATE: no V-TR-7; the test's runtime does not break it")
	}
	if judged(admissionv1.Update, edit(func(md map[string]any) { md["finalizers"] = []any{"example.com/x"} }), stored) {
		t.Error("a finalizer UPDATE was judged by V-TR-7")
	}
	if !judged(admissionv1.Update, edit(func(md map[string]any) { md["labels"] = map[string]any{"team": "a"} }), stored) {
		t.Error("a label UPDATE was not judged by V-TR-7")
	}
}
