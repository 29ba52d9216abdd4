package celrules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// requiredLabel finds a label value every matching namespace has only
// where the selector forces exactly one: matchLabels, or In with a single
// value; never for NotIn, Exists, DoesNotExist or In with a choice.
func TestRequiredLabel(t *testing.T) {
	parse := func(ls *metav1.LabelSelector) labels.Selector {
		t.Helper()
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		return sel
	}
	req := func(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	for _, tc := range []struct {
		name string
		sel  labels.Selector
		want string // "" for none
	}{
		{"nil", nil, ""},
		{"nothing", labels.Nothing(), ""},
		{"everything", labels.Everything(), ""},
		{"matchLabels", parse(&metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}), "team=a"},
		{"== parsed", mustParse(t, "team==a"), "team=a"},
		{"In one", parse(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req("team", metav1.LabelSelectorOpIn, "b")}}), "team=b"},
		{"In two", parse(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req("team", metav1.LabelSelectorOpIn, "a", "b")}}), ""},
		{"NotIn", parse(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req("team", metav1.LabelSelectorOpNotIn, "a")}}), ""},
		{"Exists", parse(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req("gpu", metav1.LabelSelectorOpExists)}}), ""},
		{"!=", mustParse(t, "team!=a"), ""},
		{"Exists, then one value", parse(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			req("gpu", metav1.LabelSelectorOpExists), req("zone", metav1.LabelSelectorOpIn, "eu")}}), "zone=eu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := requiredLabel(tc.sel)
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("requiredLabel = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// The namespace index keeps, in evaluation order, the rules any namespace
// may match and those whose required label the namespace has; a list no
// rule of which requires a label has no index.
func TestNamespaceIndexNarrows(t *testing.T) {
	rule := func(id, requires string) *compiledRule {
		return &compiledRule{rule: Rule{ID: id}, nsRequires: requires}
	}
	list := []*compiledRule{
		rule("open-1", ""),
		rule("team-a", "team=a"),
		rule("team-b", "team=b"),
		rule("open-2", ""),
		rule("team-a-again", "team=a"),
		rule("open-3", ""),
		rule("gpu", "gpu=yes"),
	}
	idx := newNamespaceIndex(list)
	if idx == nil {
		t.Fatal("no index of a list with label requirements")
	}
	ids := func(rs []*compiledRule) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.rule.ID)
		}
		return out
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{"open-1", "open-2", "open-3"}},
		{map[string]string{"team": "a"}, []string{"open-1", "team-a", "open-2", "team-a-again", "open-3"}},
		{map[string]string{"team": "b", "gpu": "yes"}, []string{"open-1", "team-b", "open-2", "open-3", "gpu"}},
		{map[string]string{"team": "c", "gpu": "no"}, []string{"open-1", "open-2", "open-3"}},
	} {
		if diff := cmp.Diff(tc.want, ids(idx.narrow(list, tc.labels))); diff != "" {
			t.Errorf("namespace labelled %v (-want +got):\n%s", tc.labels, diff)
		}
	}
	// A narrowing leaves the index as it was (its lists share arrays):
	// the open rules are still the open rules after one.
	idx.narrow(list, map[string]string{"team": "b"})
	if diff := cmp.Diff([]string{"open-1", "open-2", "open-3"}, ids(idx.narrow(list, nil))); diff != "" {
		t.Errorf("after a narrowing, a namespace without labels (-want +got):\n%s", diff)
	}
	if newNamespaceIndex([]*compiledRule{rule("x", ""), rule("y", "")}) != nil {
		t.Error("an index of rules none of which requires a label")
	}
}
