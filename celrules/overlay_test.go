package celrules

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// ids lists the rules' IDs.
func ids(rules []*compiledRule) []string {
	out := make([]string, 0, len(rules))
	for _, cr := range rules {
		out = append(out, cr.rule.ID)
	}
	return out
}

// Policies set, replaced (onto another kind), broken and deleted in any
// order, with the built-ins on: after every change, the rules an
// evaluation runs for each resource (the snapshot with the changes over
// it, or rebuilt once more than maxOverlay changed) are exactly those of
// the whole rule set that cover it, in evaluation order — built-ins first,
// then policies by name.
func TestOverlayAgreesWithARebuild(t *testing.T) {
	e, err := NewEngine(Config{Schemas: seedSchemas(t)})
	if err != nil {
		t.Fatal(err)
	}
	resources := []schema.GroupResource{
		{Group: "trainer.kubeflow.org", Resource: "trainjobs"},
		{Group: "trainer.kubeflow.org", Resource: "clustertrainingruntimes"},
		{Group: "jobset.x-k8s.io", Resource: "jobsets"},
		{Group: "grove.io", Resource: "podcliquesets"},
	}
	kinds := []func(*shepherdv1alpha1.WorkloadPolicySpec){
		nil, // TrainJobs
		func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Match.Resources[0].Kinds = []string{"ClusterTrainingRuntime"}
		},
		func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Match.Resources = []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"jobset.x-k8s.io"}, Kinds: []string{"JobSet"}}}
		},
		func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Match.Resources = append(s.Match.Resources, shepherdv1alpha1.ResourceRule{APIGroups: []string{"jobset.x-k8s.io"}, Kinds: []string{"JobSet"}})
		},
	}
	// want is the oracle: every rule in force, in evaluation order,
	// filtered by what it covers.
	want := func(gr schema.GroupResource) []string {
		e.mu.RLock()
		defer e.mu.RUnlock()
		var out []string
		for _, cr := range e.builtins {
			if cr.covers(gr) {
				out = append(out, cr.rule.ID)
			}
		}
		for _, n := range e.names {
			if cr := e.policies[n]; cr.covers(gr) {
				out = append(out, cr.rule.ID)
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	overlaid, rebuilds := 0, 0
	for step := range 400 {
		name := fmt.Sprintf("p%02d", rng.IntN(90))
		var what string
		switch op := rng.IntN(10); {
		case op < 6:
			k := rng.IntN(len(kinds))
			e.SetPolicy(policy(name, kinds[k], "true"))
			what = fmt.Sprintf("set %s (kind variant %d)", name, k)
		case op < 8:
			e.DeletePolicy(name)
			what = "delete " + name
		default:
			if errs := e.SetPolicy(policy(name, nil, "object.spec.nosuchfield > 0")); len(errs) == 0 {
				t.Fatalf("step %d: a policy that does not type-check compiled", step)
			}
			what = "break " + name
		}
		e.mu.RLock()
		if e.stale.Load() {
			rebuilds++
		} else if e.overlay != nil {
			overlaid++
		}
		e.mu.RUnlock()
		for _, gr := range resources {
			if diff := cmp.Diff(want(gr), ids(candidatesOf(e, gr))); diff != "" {
				t.Fatalf("step %d (%s): the rules run for %s (-whole rule set +snapshot with the changes over it):\n%s", step, what, gr, diff)
			}
		}
	}
	// Both paths ran: changes applied over the snapshot, and a rebuild
	// once more than maxOverlay of them piled up.
	if overlaid == 0 || rebuilds == 0 {
		t.Errorf("over 400 changes: %d evaluated over the snapshot, %d after a rebuild; want both", overlaid, rebuilds)
	}
}
