package celrules

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// The namespaceSelector parsed once at compile time (outsideNamespaces),
// and the index of the labels selectors require (namespaceIndex), only
// skip what the apiserver's matcher, run alone, also finds no match for: the verdicts with it and without it are the same for every
// selector form, every namespace, a namespace that cannot be found (the
// matcher's 404 still shows) and a cluster-scoped object.
func TestNamespaceSelectorShortcutDecidesAsTheMatcher(t *testing.T) {
	selectors := map[string]*metav1.LabelSelector{
		"labels":          {MatchLabels: map[string]string{"team": "a"}},
		"in":              {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}},
		"notin":           {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}},
		"exists":          {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpExists}}},
		"doesnotexist":    {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpDoesNotExist}}},
		"empty":           {},
		"in-one":          {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"b"}}}},
		"two-labels":      {MatchLabels: map[string]string{"team": "b", "gpu": "yes"}},
		"label-and-notin": {MatchLabels: map[string]string{"gpu": "yes"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}},
	}
	var policies []*shepherdv1alpha1.WorkloadPolicy
	for name, sel := range selectors {
		policies = append(policies, policy(name, func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.NamespaceSelector = sel }, "false"))
	}
	namespaces := map[string]map[string]string{
		"team-a": {"team": "a"},
		"team-b": {"team": "b", "gpu": "yes"},
		"plain":  nil,
	}
	lookup := func(_ context.Context, name string) (*corev1.Namespace, error) {
		l, ok := namespaces[name]
		if !ok {
			return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		}
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, nil
	}
	verdicts := func(e *Engine, ns string) []string {
		in := trainJobInput("CREATE", trainJob(nil, nil), nil)
		in.Namespace, in.Namespaces = ns, lookup
		var out []string
		for _, r := range e.Evaluate(context.Background(), in) {
			out = append(out, fmt.Sprintf("%s/%s/eval-error=%v", r.Rule, r.Action, r.EvalError))
		}
		return out
	}
	fast := policyEngine(t, policies...)
	plain := policyEngine(t, policies...)
	shortcuts := 0
	for _, cr := range plain.snapshot() {
		if cr.nsSelector != nil {
			shortcuts++
		}
		cr.nsSelector, cr.nsRequires = nil, "" // the matcher alone
	}
	plain.changed() // rebuild its index without the selectors: nothing narrowed
	fast.fresh()    // the policies folded into the index, not over it
	_, idx, _ := fast.candidatesFor(schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "trainjobs"})
	indexed := 0
	if idx != nil {
		for _, pos := range idx.byLabel {
			indexed += len(pos)
		}
	}
	if indexed != 4 {
		t.Fatalf("namespace index %+v, want the four selectors that require one label value", idx)
	}
	if shortcuts != len(selectors)-1 {
		t.Fatalf("%d rules have a parsed selector, want every non-empty one (%d)", shortcuts, len(selectors)-1)
	}
	for _, ns := range []string{"team-a", "team-b", "plain", "missing", ""} {
		if diff := cmp.Diff(verdicts(plain, ns), verdicts(fast, ns)); diff != "" {
			t.Errorf("namespace %q: verdicts (-matcher alone +with the shortcut):\n%s", ns, diff)
		}
	}
	if got := verdicts(fast, "team-a"); len(got) == 0 {
		t.Error("no rule matched in team-a: the test compares nothing")
	}
}
