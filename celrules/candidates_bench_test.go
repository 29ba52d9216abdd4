package celrules

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkCandidates10kPolicies: rebuilding the index of the built-ins
// and 10,000 per-team policies, what the first admission after a change
// of the rules pays.
func BenchmarkCandidates10kPolicies(b *testing.B) {
	rules := make([]*compiledRule, 0, 10000)
	for i := range 10000 {
		cr := ruleOn(fmt.Sprintf("p-%05d", i), [2][]string{{"trainer.kubeflow.org"}, {"trainjobs"}})
		sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%05d", i)}})
		if err != nil {
			b.Fatal(err)
		}
		cr.nsSelector = sel
		cr.nsRequires, _ = requiredLabel(sel)
		rules = append(rules, cr)
	}
	b.ReportAllocs()
	for b.Loop() {
		newCandidates(rules)
	}
}
