package celrules

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Policies compile without the engine's lock, several at once (the
// WorkloadPolicy controller runs several workers), while admissions
// evaluate: every policy given ends up enforced exactly once, a deleted
// one not at all, and an evaluation sees a consistent snapshot.
func TestPoliciesCompileConcurrentlyWithEvaluations(t *testing.T) {
	e := policyEngine(t)
	const workers, each = 4, 25
	stop := make(chan struct{})
	var evals sync.WaitGroup
	evals.Add(1)
	go func() {
		defer evals.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Every policy denies this TrainJob (no "team" label).
			res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, nil), nil))
			seen := map[string]bool{}
			for _, r := range res {
				if seen[r.Rule] {
					t.Errorf("rule %s judged twice in one evaluation", r.Rule)
				}
				seen[r.Rule] = true
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := policy(fmt.Sprintf("p-%d-%02d", w, i), nil, "has(object.metadata.labels) && 'team' in object.metadata.labels")
				p.ResourceVersion = "1"
				if errs := e.SetPolicy(p); len(errs) > 0 {
					t.Errorf("%s: %v", p.Name, errs)
				}
				if i%5 == 4 {
					e.DeletePolicy(p.Name)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	evals.Wait()

	res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, nil), nil))
	if want := workers * each * 4 / 5; len(res) != want {
		t.Errorf("%d policies deny after the loads, want %d (every one given, less the deleted)", len(res), want)
	}
	for _, r := range res {
		var w, i int
		if _, err := fmt.Sscanf(r.Rule, "p-%d-%d", &w, &i); err != nil || i%5 == 4 {
			t.Errorf("rule %s enforced: deleted, or never given", r.Rule)
		}
	}
}
