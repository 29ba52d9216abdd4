package celrules

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// RequestBudget is the CEL cost budget of one admission request across every
// rule, the apiserver's per-policy runtime budget; each single expression is
// further capped at celconfig.PerCallLimit by the environment.
const RequestBudget = celconfig.RuntimeCELCostBudget

const (
	reasonInvalid   = string(field.ErrorTypeInvalid)
	reasonForbidden = string(field.ErrorTypeForbidden)
)

// request is the evaluation state shared by every rule of one admission:
// the CEL values of object, oldObject, request and namespaceObject (the
// last two built on first use), variables shared between rules, and the
// cost of variable evaluations not yet charged to the budget.
type request struct {
	ctx context.Context
	in  *Input

	// object and oldObject are the decoded JSON maps themselves, seen as
	// CEL values (values.go).
	object, oldObject ref.Val
	admission         ref.Val
	namespace         ref.Val

	// shared holds the values of the variables evaluated so far, by
	// sharedKey: a request evaluates a handful, so a slice searched in
	// order costs less than a map.
	shared  []sharedValue
	varCost int64
	// lastVarCost is the part of the last expression's cost spent on
	// variables: when a combined expression's cost is not charged, its
	// variables' still is, because later expressions reuse their values.
	lastVarCost int64
}

type sharedValue struct {
	key string
	val ref.Val
}

func newRequest(ctx context.Context, in *Input) *request {
	r := &request{ctx: ctx, in: in, object: celtypes.NullValue, oldObject: celtypes.NullValue}
	if in.Object != nil {
		r.object = jsonObject(in.Object)
	}
	if in.OldObject != nil {
		r.oldObject = jsonObject(in.OldObject)
	}
	return r
}

// admissionRequest is the CEL `request` variable: the AdmissionRequest the
// apiserver would build for a ValidatingAdmissionPolicy, without the
// objects.
func (r *request) admissionRequest() ref.Val {
	if r.admission != nil {
		return r.admission
	}
	in := r.in
	gvk := metav1.GroupVersionKind{Group: in.Group, Version: in.Version, Kind: in.Kind}
	gvr := metav1.GroupVersionResource{Group: in.Group, Version: in.Version, Resource: in.Resource}
	userInfo := authenticationv1.UserInfo{Username: in.UserInfo.Username, UID: in.UserInfo.UID, Groups: in.UserInfo.Groups, Extra: map[string]authenticationv1.ExtraValue{}}
	for k, v := range in.UserInfo.Extra {
		userInfo.Extra[k] = v
	}
	dryRun := in.DryRun
	r.admission = common.SchemalessTypedToVal(&admissionv1.AdmissionRequest{
		UID:             types.UID(in.UID),
		Kind:            gvk,
		Resource:        gvr,
		RequestKind:     &gvk,
		RequestResource: &gvr,
		Name:            in.Name,
		Namespace:       in.Namespace,
		Operation:       admissionv1.Operation(in.Operation),
		UserInfo:        userInfo,
		DryRun:          &dryRun,
	})
	return r.admission
}

// namespaceObject is the CEL `namespaceObject` variable (null when the
// namespace is unknown or the object cluster-scoped).
func (r *request) namespaceObject() ref.Val {
	if r.namespace == nil {
		r.namespace = common.SchemalessTypedToVal(plugincel.CreateNamespaceObject(r.in.NamespaceObject))
	}
	return r.namespace
}

// activation resolves the names of one rule's expressions: the request's
// values and that rule's variables.
type activation struct {
	r    *request
	vars ref.Val
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.r.object, true
	case plugincel.OldObjectVarName:
		return a.r.oldObject, true
	case plugincel.RequestVarName:
		return a.r.admissionRequest(), true
	case plugincel.NamespaceVarName:
		return a.r.namespaceObject(), true
	case plugincel.ParamsVarName:
		return celtypes.NullValue, true
	case plugincel.VariableVarName:
		return a.vars, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// newActivation builds the activation of expressions declaring vars: a
// rule's, or a combined program's.
func newActivation(r *request, vars []compiledVariable) *activation {
	a := &activation{r: r}
	if len(vars) == 0 {
		a.vars = celtypes.NullValue
	} else {
		a.vars = &ruleVariables{a: a, defs: vars, values: make([]ref.Val, len(vars))}
	}
	return a
}

// variable evaluates one variable, or takes the value another rule's
// identical definition already produced in this request.
func (r *request) variable(a *activation, v compiledVariable) ref.Val {
	for _, sv := range r.shared {
		if sv.key == v.sharedKey {
			return sv.val
		}
	}
	val, details, err := v.program.ContextEval(r.ctx, a)
	if details == nil || details.ActualCost() == nil {
		return celtypes.NewErr("unable to calculate the cost of variable %q", v.name)
	}
	r.varCost = addCost(r.varCost, *details.ActualCost())
	if err != nil {
		val = celtypes.NewErr("variable %q fails to evaluate: %v", v.name, err)
	}
	r.shared = append(r.shared, sharedValue{key: v.sharedKey, val: val})
	return val
}

func addCost(total int64, cost uint64) int64 {
	if cost > math.MaxInt64 || total > math.MaxInt64-int64(cost) {
		return math.MaxInt64
	}
	return total + int64(cost)
}

// errOutOfBudget ends a request's evaluation: no rule runs after it.
var errOutOfBudget = fmt.Errorf("validation failed due to running out of cost budget, no further validation rules will be run: %w", apiservercel.ErrOutOfBudget)

// run evaluates one expression and charges its cost, and the cost of the
// variables it evaluated, to the budget. An expression error (including the
// per-expression cost limit) is returned as exprErr with the remaining
// budget; running out of budget is err, with budget -1.
func (a *activation) run(p cel.Program, budget int64) (val ref.Val, remaining int64, exprErr, err error) {
	val, details, evalErr := p.ContextEval(a.r.ctx, a)
	cost := a.r.varCost
	a.r.lastVarCost, a.r.varCost = cost, 0
	if details == nil || details.ActualCost() == nil {
		return nil, -1, nil, errors.New("the runtime cost of an expression could not be calculated")
	}
	cost = addCost(cost, *details.ActualCost())
	if cost > budget {
		return nil, -1, nil, errOutOfBudget
	}
	if evalErr != nil {
		return nil, budget - cost, evalErr, nil
	}
	return val, budget - cost, nil, nil
}

// matches applies a rule's match block: resources, operations and the
// namespace and object selectors, with ValidatingAdmissionPolicy semantics.
func (cr *compiledRule) matches(r *request) bool {
	in := r.in
	resourceMatch := false
	for _, rr := range cr.rule.Match.Resources {
		if matchResourceRule(rr, in) {
			resourceMatch = true
			break
		}
	}
	if !resourceMatch {
		return false
	}
	// A cluster-scoped object always matches a namespaceSelector, except a
	// Namespace, which is matched on its own labels.
	if !cr.namespaceSelector.Empty() && (in.Namespace != "" || (in.Group == "" && in.Kind == "Namespace")) {
		var nsLabels labels.Set
		switch {
		case in.Namespace == "":
			nsLabels = objectLabels(in.Object)
		case in.NamespaceObject != nil:
			nsLabels = in.NamespaceObject.Labels
		}
		if !cr.namespaceSelector.Matches(nsLabels) {
			return false
		}
	}
	if !cr.objectSelector.Empty() {
		if !cr.objectSelector.Matches(objectLabels(in.Object)) && !cr.objectSelector.Matches(objectLabels(in.OldObject)) {
			return false
		}
	}
	return true
}

func objectLabels(obj map[string]any) labels.Set {
	if obj == nil {
		return nil
	}
	return (&unstructured.Unstructured{Object: obj}).GetLabels()
}

func matchResourceRule(rr shepherdv1alpha1.ResourceRule, in *Input) bool {
	ops := rr.Operations
	if len(ops) == 0 {
		ops = []string{"CREATE", "UPDATE"}
	}
	if !slices.Contains(ops, "*") && !slices.Contains(ops, in.Operation) {
		return false
	}
	if !slices.Contains(rr.APIGroups, "*") && !slices.Contains(rr.APIGroups, in.Group) {
		return false
	}
	return slices.Contains(rr.Kinds, "*") || slices.Contains(rr.Kinds, in.Kind) ||
		slices.Contains(rr.Resources, "*") || slices.Contains(rr.Resources, in.Resource)
}

func (s *ruleSet) evaluate(ctx context.Context, in *Input) []Result {
	return s.evaluateWith(ctx, in, true)
}

// evaluateWith evaluates with or without the combined programs (fuse.go,
// compiledRule.passes); both give the same results, which the tests check.
func (s *ruleSet) evaluateWith(ctx context.Context, in *Input, combined bool) []Result {
	r := newRequest(ctx, in)
	budget := int64(RequestBudget)
	var passed map[*compiledRule]bool
	if f := s.combinedFor(in, combined); f != nil {
		val, remaining, exprErr, err := newActivation(r, f.variables).run(f.program, budget)
		if err == nil && exprErr == nil && val == celtypes.True {
			budget = remaining
			passed = f.members
		} else {
			budget -= r.lastVarCost
		}
	}
	var out []Result
	for _, cr := range s.rules {
		if passed[cr] || !cr.matches(r) {
			continue
		}
		var res []Result
		res, budget = cr.evaluate(r, budget, combined)
		out = append(out, res...)
	}
	return out
}

// evalError is the result of a rule that could not be evaluated: a Deny
// naming the rule, or with failurePolicy Ignore a warning naming it.
func (cr *compiledRule) evalError(field string, err error) Result {
	msg := fmt.Sprintf("rule %s could not be evaluated: %v", cr.rule.ID, err)
	if errors.Is(err, apiservercel.ErrOutOfBudget) {
		msg = fmt.Sprintf("rule %s exceeded the CEL cost budget: %v", cr.rule.ID, err)
	}
	action := shepherdv1alpha1.ActionDeny
	if cr.failurePolicy == shepherdv1alpha1.FailurePolicyIgnore {
		action = shepherdv1alpha1.ActionWarn
		msg += " (ignored: failurePolicy Ignore)"
	}
	return Result{Rule: cr.rule.ID, Action: action, Field: field, Message: msg, Reason: reasonInvalid, EvalError: true}
}

// evaluate runs one rule as the apiserver runs a ValidatingAdmissionPolicy:
// matchConditions (any false skips the rule, even if others failed), then
// every validation, then messages and field paths of the failed ones only.
func (cr *compiledRule) evaluate(r *request, budget int64, combined bool) ([]Result, int64) {
	if budget <= 0 {
		return []Result{cr.evalError("", apiservercel.ErrOutOfBudget)}, budget
	}
	a := newActivation(r, cr.variables)
	if combined && cr.passes != nil {
		val, remaining, exprErr, err := a.run(cr.passes, budget)
		if err == nil && exprErr == nil && val == celtypes.True {
			return nil, remaining
		}
		// Not charged: the expressions below are, one by one, as the
		// apiserver charges them. Its variables are, once.
		budget -= r.lastVarCost
	}
	var condErr error
	for i, mc := range cr.matchConditions {
		val, remaining, exprErr, err := a.run(mc.program, budget)
		if err != nil {
			return []Result{cr.evalError("", err)}, remaining
		}
		budget = remaining
		switch {
		case exprErr != nil:
			condErr = errors.Join(condErr, fmt.Errorf("matchCondition %q: expression '%s' resulted in error: %w", cr.rule.MatchConditions[i].Name, mc.expression, exprErr))
		case val != celtypes.True:
			return nil, budget
		}
	}
	if condErr != nil {
		return []Result{cr.evalError("", condErr)}, budget
	}
	var out []Result
	for i, v := range cr.validations {
		val, remaining, exprErr, err := a.run(v.program, budget)
		if err != nil {
			return append(out, cr.evalError("", err)), remaining
		}
		budget = remaining
		spec := cr.rule.Validations[i]
		switch {
		case exprErr != nil:
			out = append(out, cr.evalError(strings.TrimPrefix(spec.FieldPath, "."), fmt.Errorf("expression '%s' resulted in error: %w", v.expression, exprErr)))
		case val != celtypes.True:
			// Messages and field paths are computed only for failed
			// validations; an error in them falls back to the static
			// message and path.
			msg := validationMessage(spec, cr.optional(a, cr.messages[i], &budget))
			reason := reasonInvalid
			if spec.Reason != nil && *spec.Reason == metav1.StatusReasonForbidden {
				reason = reasonForbidden
			}
			fields := fieldPaths(cr.optional(a, cr.fieldPaths[i], &budget))
			if len(fields) == 0 {
				fields = []string{strings.TrimPrefix(spec.FieldPath, ".")}
			}
			for _, f := range fields {
				out = append(out, Result{Rule: cr.rule.ID, Action: cr.action, Field: f, Message: msg, Reason: reason})
			}
		}
	}
	return out, budget
}

// optional evaluates a messageExpression or fieldPathsExpression: nil when
// there is none, it fails, or the budget runs out (the next rule reports
// the budget).
func (cr *compiledRule) optional(a *activation, e compiledExpr, budget *int64) ref.Val {
	if e.program == nil || *budget <= 0 {
		return nil
	}
	val, remaining, exprErr, err := a.run(e.program, *budget)
	*budget = remaining
	if err != nil || exprErr != nil {
		return nil
	}
	return val
}

// validationMessage picks the message as the apiserver does: a non-empty
// single-line messageExpression result, else message, else the expression.
func validationMessage(v shepherdv1alpha1.Validation, message ref.Val) string {
	if s, ok := message.(celtypes.String); ok {
		m := strings.TrimSpace(string(s))
		if m != "" && !strings.Contains(m, "\n") && len(m) <= celconfig.MaxEvaluatedMessageExpressionSizeBytes {
			return m
		}
	}
	if m := strings.TrimSpace(v.Message); m != "" {
		return m
	}
	return "failed expression: " + strings.TrimSpace(v.Expression)
}

func fieldPaths(paths ref.Val) []string {
	lister, ok := paths.(traits.Lister)
	if !ok {
		return nil
	}
	var out []string
	it := lister.Iterator()
	for it.HasNext() == celtypes.True {
		if s, ok := it.Next().(celtypes.String); ok && s != "" {
			out = append(out, string(s))
		}
	}
	return out
}
