package celrules

import (
	"context"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// EvaluateOneByOne evaluates every rule expression by expression, without
// the combined programs, for tests that compare the two.
func (e *Engine) EvaluateOneByOne(ctx context.Context, in *Input) []Result {
	return e.snapshot().evaluateWith(ctx, in, false)
}

// CombinedRules is the number of rules evaluated as one program for in.
func (e *Engine) CombinedRules(in *Input) int {
	return len(e.snapshot().fusedForNow(in).members)
}

// Combine combines validations (of one rule without matchConditions) as
// the combined program does.
func Combine(validations []string) string {
	r := Rule{ID: "r"}
	for _, v := range validations {
		r.Validations = append(r.Validations, shepherdv1alpha1.Validation{Expression: v})
	}
	return combine([]*compiledRule{{rule: r}})
}
