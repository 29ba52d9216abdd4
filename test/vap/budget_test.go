package vap

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// The budget cases rest on the cost of one expression: `image.contains(arg)`
// costs ceil(len(image)·0.1)·ceil(len(arg)·0.1) — 10,000 for an image of
// 100,000 characters and an arg of 10 — so one all() or exists() over 80
// args costs about 800,000, under celconfig.PerCallLimit (1M) and cheap to
// run (a few milliseconds). TestBudgetCasesAreSizedAsIntended measures the
// costs with the apiserver's own CEL environment and checks the sums below.
const (
	bigImageLen = 100_000
	bigArgs     = 80
	// nearBudgetValidations cost 9.6M: just under one policy's 10M.
	nearBudgetValidations = 12
	// overBudgetValidations cost 10.4M: over it.
	overBudgetValidations = 13
	// conditionsWithinBudget cost 1.6M of the matchConditions' own 2.5M;
	// validationsBesideConditions 8.8M of the validations' 10M: together
	// over one 10M.
	conditionsWithinBudget      = 2
	validationsBesideConditions = 11
	// conditionsOverBudget cost 3.2M: over the matchConditions' 2.5M.
	conditionsOverBudget = 4
	// manyAll policies of the many-all-exists case range all() over the
	// args that occur in the image (a filter costing 0.8M, the same list
	// in each): 10.4M together; manyExists range exists() over the args,
	// cheaply.
	manyAll    = 13
	manyExists = 2
)

// badArg occurs in bigTrainJob's image.
var badArg = strings.Repeat("a", 10)

// bigTrainJob is the TrainJob of the budget cases. Every heavy expression
// is true for it, unless bad: its first arg then occurs in the image and
// every heavy expression is false.
func bigTrainJob(bad bool) *unstructured.Unstructured {
	tj := trainJob(1)
	args := make([]any, bigArgs)
	for i := range args {
		args[i] = fmt.Sprintf("--flag-%03d", i)
	}
	if bad {
		args[0] = badArg
	}
	_ = unstructured.SetNestedField(tj.Object, strings.Repeat("a", bigImageLen), "spec", "trainer", "image")
	_ = unstructured.SetNestedSlice(tj.Object, args, "spec", "trainer", "args")
	return tj
}

// heavyExpression ranges over the args — all() for odd i, exists() for
// even — and is true unless an arg occurs in the image; i makes each
// expression distinct (the "|| i < 0" is never evaluated for a true range).
func heavyExpression(i int) string {
	if i%2 == 1 {
		return fmt.Sprintf("object.spec.trainer.args.all(a, !object.spec.trainer.image.contains(a)) || %d < 0", i)
	}
	return fmt.Sprintf("!object.spec.trainer.args.exists(a, object.spec.trainer.image.contains(a)) || %d < 0", i)
}

func heavyValidations(n int) policyOpt {
	var vs []shepherdv1alpha1.Validation
	for i := 1; i <= n; i++ {
		vs = append(vs, validate(heavyExpression(i), fmt.Sprintf("an arg occurs in the image (%d)", i)))
	}
	return validations(vs...)
}

// manyExpression is the validation of the i-th policy of the
// many-all-exists case: true unless an arg is badArg.
func manyExpression(i int) string {
	if i <= manyAll {
		return fmt.Sprintf("object.spec.trainer.args.filter(a, object.spec.trainer.image.contains(a)).all(a, a == 'allowed-%d')", i)
	}
	return fmt.Sprintf("!object.spec.trainer.args.exists(a, a == '%s' || a == 'forbidden-%d')", badArg, i)
}

func nearBudgetPolicy(name string) *shepherdv1alpha1.WorkloadPolicy {
	return policy(name, heavyValidations(nearBudgetValidations))
}

func overBudgetPolicy(name string, fp shepherdv1alpha1.FailurePolicy) *shepherdv1alpha1.WorkloadPolicy {
	return policy(name, failurePolicy(fp), heavyValidations(overBudgetValidations))
}

func heavyConditionsPolicy(name string, conditions, vals int) *shepherdv1alpha1.WorkloadPolicy {
	var mcs []shepherdv1alpha1.MatchCondition
	for i := 1; i <= conditions; i++ {
		mcs = append(mcs, shepherdv1alpha1.MatchCondition{Name: fmt.Sprintf("heavy-%d", i), Expression: heavyExpression(i)})
	}
	return policy(name, matchConditions(mcs...), heavyValidations(vals))
}

// celCompiler is the apiserver's compiler of admission-policy expressions,
// with its base environment (libraries, cost estimator, per-call limit).
var celCompiler = sync.OnceValue(func() plugincel.Compiler {
	return plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
})

// celCost is the actual cost of expr on obj as the apiserver counts it.
func celCost(t *testing.T, expr string, obj map[string]any) int64 {
	t.Helper()
	res := celCompiler().CompileCELExpression(&validating.ValidationCondition{Expression: expr}, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions)
	if res.Error != nil {
		t.Fatalf("%s: %v", expr, res.Error)
	}
	_, details, err := res.Program.ContextEval(context.Background(), map[string]any{"object": obj, "oldObject": nil})
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return int64(*details.ActualCost())
}

// TestBudgetCasesAreSizedAsIntended: the budget cases of the parity suite
// mean what they say — each expression under the per-call limit, a
// near-budget policy within 10% under its 10M, the over-budget one over it,
// the matchConditions within or over their 2.5M, and the policies of the
// many-all-exists case each within its budget but over one 10M together.
func TestBudgetCasesAreSizedAsIntended(t *testing.T) {
	obj := bigTrainJob(false).Object
	cost := func(expr string) int64 {
		c := celCost(t, expr, obj)
		if c >= celconfig.PerCallLimit {
			t.Fatalf("%s costs %d, over the per-call limit %d", expr, c, celconfig.PerCallLimit)
		}
		return c
	}
	validationsCost := func(p *shepherdv1alpha1.WorkloadPolicy) int64 {
		var sum int64
		for _, v := range p.Spec.Validations {
			sum += cost(v.Expression)
		}
		return sum
	}
	conditionsCost := func(p *shepherdv1alpha1.WorkloadPolicy) int64 {
		var sum int64
		for _, mc := range p.Spec.MatchConditions {
			sum += cost(mc.Expression)
		}
		return sum
	}
	const budget, mcBudget = celconfig.RuntimeCELCostBudget, celconfig.RuntimeCELCostBudgetMatchConditions

	near := validationsCost(nearBudgetPolicy("near"))
	if near >= budget || near < budget*9/10 {
		t.Errorf("a near-budget policy costs %d: want within 10%% under %d", near, budget)
	}
	if over := validationsCost(overBudgetPolicy("over", shepherdv1alpha1.FailurePolicyFail)); over <= budget {
		t.Errorf("the over-budget policy costs %d: want over %d", over, budget)
	}
	own := heavyConditionsPolicy("own", conditionsWithinBudget, validationsBesideConditions)
	if mc, v := conditionsCost(own), validationsCost(own); mc >= mcBudget || v >= budget || mc+v <= budget {
		t.Errorf("mc-budget-own: matchConditions %d (want under %d), validations %d (want under %d), together %d (want over %d)", mc, mcBudget, v, budget, mc+v, budget)
	}
	if mc := conditionsCost(heavyConditionsPolicy("over", conditionsOverBudget, 1)); mc <= mcBudget {
		t.Errorf("mc-budget-over: matchConditions cost %d: want over %d", mc, mcBudget)
	}
	var total int64
	for i := 1; i <= manyAll+manyExists; i++ {
		c := cost(manyExpression(i))
		if c >= budget {
			t.Errorf("%s costs %d: over a policy's budget", manyExpression(i), c)
		}
		total += c
	}
	if total <= budget {
		t.Errorf("the %d policies of %s cost %d together: want over one budget of %d", manyAll+manyExists, manyCase, total, budget)
	}
	t.Logf("costs: near-budget policy %d, many-all-exists together %d (budget %d, matchConditions %d, per call %d)", near, total, budget, mcBudget, celconfig.PerCallLimit)
}
