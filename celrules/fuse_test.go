package celrules_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
)

// corpusAndEngine loads the admission corpus and an engine of the built-in
// rules.
func corpusAndEngine(t *testing.T) ([]corpus.Case, *celrules.Engine) {
	t.Helper()
	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	e, err := celrules.NewEngine(seedcrds.Config(celrules.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	return cases, e
}

// Evaluating the rules that match a request as one combined program first
// is an optimisation only: for every corpus case, allowed or denied, CREATE
// or UPDATE, the results are exactly those of evaluating every expression on
// its own.
func TestCombinedEvaluationGivesTheSameResultsAsOneByOne(t *testing.T) {
	cases, e := corpusAndEngine(t)
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
	got := celrules.Combine(celrules.RuleOf(nil,
		"object.spec.items.all(x, x.a > 0)",
		"object.spec.items.all(x, has(x.b))",
		"object.spec.items.all(y, y.a < 9)",
		"object.spec.name != ''",
	))
	want := "(object.spec.items).all(x, (x.a > 0) && (has(x.b))) && (object.spec.items).all(y, (y.a < 9)) && (object.spec.name != '')"
	if got != want {
		t.Fatalf("combined:\n got %s\nwant %s", got, want)
	}
}

// Rules with the same matchConditions share one conditional, inside which
// their comprehensions over the same range are merged too; nothing crosses
// into or out of a conditional, so a condition is never left unevaluated by
// an empty range.
func TestCombinedRulesShareTheirMatchConditions(t *testing.T) {
	training := []string{"object.spec.type == 'Training'"}
	got := celrules.Combine(
		celrules.RuleOf(nil, "object.spec.items.all(x, x.a > 0)"),
		celrules.RuleOf(training, "object.spec.items.all(x, has(x.b))", "object.spec.name != ''"),
		celrules.RuleOf([]string{"object.spec.type == 'Inference'"}, "object.spec.items.all(x, has(x.c))"),
		celrules.RuleOf(training, "object.spec.items.all(x, x.a < 9)"),
		celrules.RuleOf(nil, "object.spec.items.all(x, x.a != 5)"),
	)
	want := "(object.spec.items).all(x, (x.a > 0) && (x.a != 5))" +
		" && (((object.spec.type == 'Training')) ? ((object.spec.items).all(x, (has(x.b)) && (x.a < 9)) && (object.spec.name != '')) : true)" +
		" && (((object.spec.type == 'Inference')) ? ((object.spec.items).all(x, (has(x.c)))) : true)"
	if got != want {
		t.Fatalf("combined:\n got %s\nwant %s", got, want)
	}
}

// A matchCondition that fails to evaluate denies (the rule could not be
// evaluated), even when the validations would pass: the combined programs
// must not read such a rule as passing.
func TestMatchConditionErrorIsNotPassedByCombinedPrograms(t *testing.T) {
	e, err := celrules.NewEngine(seedcrds.Config(celrules.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"numeric-names", "numeric-names-2"} { // two: a combined program of its own
		p := &shepherdv1alpha1.WorkloadPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
			Spec: shepherdv1alpha1.WorkloadPolicySpec{
				Match:           shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}}}},
				MatchConditions: []shepherdv1alpha1.MatchCondition{{Name: "numeric", Expression: "int(object.metadata.name) > 0"}},
				Validations:     []shepherdv1alpha1.Validation{{Expression: "object.metadata.name != ''"}},
			},
		}
		if errs := e.SetPolicy(p); len(errs) > 0 {
			t.Fatal(errs)
		}
	}
	in := &celrules.Input{Operation: "CREATE", Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob", Resource: "trainjobs",
		Namespace: "ns", Name: "abc", Object: map[string]any{
			"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
			"metadata": map[string]any{"name": "abc", "namespace": "ns"}, "spec": map[string]any{"runtimeRef": map[string]any{"name": "r"}}}}
	want := e.EvaluateOneByOne(context.Background(), in)
	denied := 0
	for _, r := range want {
		if r.EvalError && (r.Rule == "numeric-names" || r.Rule == "numeric-names-2") {
			denied++
		}
	}
	if denied != 2 {
		t.Fatalf("one by one: %+v, want both policies denied for their matchCondition's error", want)
	}
	if got := e.Evaluate(context.Background(), in); !cmp.Equal(want, got) {
		t.Errorf("combined evaluation differs (-one by one +combined):\n%s", cmp.Diff(want, got))
	}
}
