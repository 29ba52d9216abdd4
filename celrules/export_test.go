package celrules

import (
	"context"
	"fmt"

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

// Combine combines rules as the combined program does.
func Combine(rules ...Rule) string {
	crs := make([]*compiledRule, len(rules))
	for i, r := range rules {
		crs[i] = &compiledRule{rule: r}
	}
	return combine(crs)
}

// RuleOf is a rule of validations under matchConditions (none when conds is
// empty), for Combine.
func RuleOf(conds []string, validations ...string) Rule {
	r := Rule{ID: "r"}
	for i, c := range conds {
		r.MatchConditions = append(r.MatchConditions, shepherdv1alpha1.MatchCondition{Name: fmt.Sprint("c", i), Expression: c})
	}
	for _, v := range validations {
		r.Validations = append(r.Validations, shepherdv1alpha1.Validation{Expression: v})
	}
	return r
}

// CombinedVariables is the number of variables the combined program for in
// evaluates as programs of their own (none when they are bound inline).
func (e *Engine) CombinedVariables(in *Input) int {
	return len(e.snapshot().fusedForNow(in).variables)
}

// InlineVariables is inlineVariables for variables given as name,
// expression pairs.
func InlineVariables(vars [][2]string, body string) (string, bool) {
	cv := make([]compiledVariable, len(vars))
	for i, v := range vars {
		cv[i] = compiledVariable{name: v[0], expression: v[1]}
	}
	return inlineVariables(cv, body)
}
