package celrules_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
)

// Evaluating the rules that match a request as one combined program first
// is an optimisation only: for every corpus case, allowed or denied, CREATE
// or UPDATE, the results are exactly those of evaluating every expression on
// its own.
func TestCombinedEvaluationGivesTheSameResultsAsOneByOne(t *testing.T) {
	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	e, err := celrules.NewEngine(celrules.Config{})
	if err != nil {
		t.Fatal(err)
	}
	combinedPassed, combinedFailed := 0, 0
	for _, c := range cases {
		gvk := c.Object.GroupVersionKind()
		in := &celrules.Input{
			Operation: c.OperationOrDefault(),
			Group:     gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
			Resource:  strings.ToLower(gvk.Kind) + "s",
			Namespace: c.Object.GetNamespace(), Name: c.Object.GetName(),
			Object: c.Object.Object,
		}
		if c.OldObject != nil {
			in.OldObject = c.OldObject.Object
		}
		want := e.EvaluateOneByOne(context.Background(), in)
		got := e.Evaluate(context.Background(), in)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: combined evaluation differs (-one by one +combined):\n%s", c.Name, diff)
		}
		if e.CombinedRules(in) > 1 {
			if len(want) == 0 {
				combinedPassed++
			} else {
				combinedFailed++
			}
		}
	}
	// The comparison means something only if both outcomes of the combined
	// program were exercised.
	if combinedPassed == 0 || combinedFailed == 0 {
		t.Fatalf("combined programs passed in %d and failed in %d cases; want both", combinedPassed, combinedFailed)
	}
	t.Logf("%d cases: combined program passed in %d, fell back in %d", len(cases), combinedPassed, combinedFailed)
}

func TestCombinedAllOverTheSameRangeIteratesOnce(t *testing.T) {
	got := celrules.Combine([]string{
		"object.spec.items.all(x, x.a > 0)",
		"object.spec.items.all(x, has(x.b))",
		"object.spec.items.all(y, y.a < 9)",
		"object.spec.name != ''",
	})
	want := "(object.spec.items).all(x, (x.a > 0) && (has(x.b))) && (object.spec.items).all(y, (y.a < 9)) && (object.spec.name != '')"
	if got != want {
		t.Fatalf("combined:\n got %s\nwant %s", got, want)
	}
}
