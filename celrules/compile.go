package celrules

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Expression accessors: the plugincel compiler checks each expression's
// output type against ReturnTypes, so a validation that is not a bool (or a
// messageExpression that is not a string) is a load error, not a runtime
// surprise.
type (
	boolExpr   string
	stringExpr string
	pathsExpr  string
	namedExpr  struct{ name, expression string }
)

func (e boolExpr) GetExpression() string    { return string(e) }
func (boolExpr) ReturnTypes() []*cel.Type   { return []*cel.Type{cel.BoolType} }
func (e stringExpr) GetExpression() string  { return string(e) }
func (stringExpr) ReturnTypes() []*cel.Type { return []*cel.Type{cel.StringType} }
func (e pathsExpr) GetExpression() string   { return string(e) }
func (pathsExpr) ReturnTypes() []*cel.Type  { return []*cel.Type{cel.ListType(cel.StringType)} }
func (e namedExpr) GetExpression() string   { return e.expression }
func (namedExpr) ReturnTypes() []*cel.Type  { return []*cel.Type{cel.AnyType} }
func (e namedExpr) GetName() string         { return e.name }
func (e namedExpr) String() string          { return e.name }
func (e boolExpr) String() string           { return string(e) }

var _ plugincel.NamedExpressionAccessor = namedExpr{}

// compiledRule is a rule ready to evaluate. It is immutable once built, so
// admissions may share it while a policy is being replaced.
type compiledRule struct {
	rule            Rule
	source          Source
	resourceVersion string
	action          shepherdv1alpha1.Action
	failurePolicy   shepherdv1alpha1.FailurePolicy

	namespaceSelector labels.Selector
	objectSelector    labels.Selector

	// matchConditions, validations, messages and fieldPaths are evaluated
	// with the rule's variables; messages and fieldPaths hold one entry per
	// validation (nil where a validation has none).
	matchConditions plugincel.ConditionEvaluator
	validations     plugincel.ConditionEvaluator
	messages        plugincel.ConditionEvaluator
	fieldPaths      plugincel.ConditionEvaluator
}

// baseEnv is the Kubernetes CEL environment of the running library version,
// the one a kube-apiserver of the same version compiles admission policies
// with (lists, regex, url, quantity, ip/cidr, format, optionals, ...).
var baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())

// optionalVars: shepherd evaluates without an authorizer and without
// params; expressions that use them fail to compile with a clear message.
var optionalVars = plugincel.OptionalVariableDeclarations{}

// compileRule compiles every expression of a rule. mode is NewExpressions
// for rules being loaded now and StoredExpressions when re-compiling
// already-accepted ones, as the apiserver does. types type-checks the rule
// against the schemas of the kinds it matches (nil skips type-checking).
// Every error is returned at once, with the field path of the expression.
func compileRule(r Rule, source Source, mode environment.Type, tc *typeChecker) (*compiledRule, field.ErrorList) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, validateShape(r, spec)...)
	if len(errs) > 0 {
		return nil, errs
	}
	cr := &compiledRule{
		rule:          r,
		source:        source,
		action:        r.action(),
		failurePolicy: r.failurePolicy(),
	}
	var err error
	if cr.namespaceSelector, err = selector(r.Match.NamespaceSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("match", "namespaceSelector"), r.Match.NamespaceSelector, err.Error()))
	}
	if cr.objectSelector, err = selector(r.Match.ObjectSelector); err != nil {
		errs = append(errs, field.Invalid(spec.Child("match", "objectSelector"), r.Match.ObjectSelector, err.Error()))
	}

	compiler, err := plugincel.NewCompositedCompiler(baseEnv)
	if err != nil {
		return nil, field.ErrorList{field.InternalError(spec, fmt.Errorf("building the CEL environment: %w", err))}
	}
	for i, v := range r.Variables {
		res := compiler.CompileAndStoreVariable(namedExpr{name: v.Name, expression: v.Expression}, optionalVars, mode)
		if res.Error != nil {
			errs = append(errs, field.Invalid(spec.Child("variables").Index(i).Child("expression"), v.Expression, compileMessage(res.Error)))
		}
	}
	conds := make([]plugincel.ExpressionAccessor, len(r.MatchConditions))
	for i, mc := range r.MatchConditions {
		conds[i] = boolExpr(mc.Expression)
	}
	cr.matchConditions = compiler.CompileCondition(conds, optionalVars, mode)
	errs = append(errs, compilationErrors(compiler, mode, cr.matchConditions, spec.Child("matchConditions"), "expression", conds)...)

	vals := make([]plugincel.ExpressionAccessor, len(r.Validations))
	msgs := make([]plugincel.ExpressionAccessor, len(r.Validations))
	paths := make([]plugincel.ExpressionAccessor, len(r.Validations))
	for i, v := range r.Validations {
		vals[i] = boolExpr(v.Expression)
		if v.MessageExpression != "" {
			msgs[i] = stringExpr(v.MessageExpression)
		}
		if v.FieldPathsExpression != "" {
			paths[i] = pathsExpr(v.FieldPathsExpression)
		}
	}
	cr.validations = compiler.CompileCondition(vals, optionalVars, mode)
	cr.messages = compiler.CompileCondition(msgs, optionalVars, mode)
	cr.fieldPaths = compiler.CompileCondition(paths, optionalVars, mode)
	errs = append(errs, compilationErrors(compiler, mode, cr.validations, spec.Child("validations"), "expression", vals)...)
	errs = append(errs, compilationErrors(compiler, mode, cr.messages, spec.Child("validations"), "messageExpression", msgs)...)
	errs = append(errs, compilationErrors(compiler, mode, cr.fieldPaths, spec.Child("validations"), "fieldPathsExpression", paths)...)

	if len(errs) == 0 && tc != nil {
		errs = append(errs, tc.check(r)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cr, nil
}

// compilationErrors attributes a condition's compilation errors to the
// expressions that caused them: the evaluator reports them without indices,
// so on this error path each expression is compiled again on its own.
func compilationErrors(compiler *plugincel.CompositedCompiler, mode environment.Type, ev plugincel.ConditionEvaluator, list *field.Path, child string, exprs []plugincel.ExpressionAccessor) field.ErrorList {
	if len(ev.CompilationErrors()) == 0 {
		return nil
	}
	var errs field.ErrorList
	for i, e := range exprs {
		if e == nil {
			continue
		}
		if res := compiler.CompileCELExpression(e, optionalVars, mode); res.Error != nil {
			errs = append(errs, field.Invalid(list.Index(i).Child(child), e.GetExpression(), compileMessage(res.Error)))
		}
	}
	return errs
}

// compileMessage turns a CEL compile error into a one-paragraph message.
func compileMessage(err error) string {
	return strings.TrimSpace(err.Error())
}

func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

var validOperations = sets.New("CREATE", "UPDATE", "DELETE", "CONNECT", "*")

// validateShape checks what the CRD schema cannot: the parts of a rule the
// compiler does not see.
func validateShape(r Rule, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.ID == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "a rule needs a name"))
	}
	switch r.action() {
	case shepherdv1alpha1.ActionDeny, shepherdv1alpha1.ActionWarn, shepherdv1alpha1.ActionAudit:
	default:
		errs = append(errs, field.NotSupported(spec.Child("action"), r.Action, []string{"Deny", "Warn", "Audit"}))
	}
	switch r.failurePolicy() {
	case shepherdv1alpha1.FailurePolicyFail, shepherdv1alpha1.FailurePolicyIgnore:
	default:
		errs = append(errs, field.NotSupported(spec.Child("failurePolicy"), r.FailurePolicy, []string{"Fail", "Ignore"}))
	}
	if len(r.Match.Resources) == 0 {
		errs = append(errs, field.Required(spec.Child("match", "resources"), "list the kinds or resources the rule applies to"))
	}
	for i, rr := range r.Match.Resources {
		p := spec.Child("match", "resources").Index(i)
		if len(rr.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), `use [""] for the core group or ["*"] for any`))
		}
		if len(rr.Kinds) == 0 && len(rr.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("kinds"), "name kinds and/or resources"))
		}
		for j, op := range rr.Operations {
			if !validOperations.Has(op) {
				errs = append(errs, field.NotSupported(p.Child("operations").Index(j), op, sets.List(validOperations)))
			}
		}
	}
	if len(r.Validations) == 0 {
		errs = append(errs, field.Required(spec.Child("validations"), "a rule needs at least one validation"))
	}
	names := sets.New[string]()
	for i, v := range r.Variables {
		if names.Has(v.Name) {
			errs = append(errs, field.Duplicate(spec.Child("variables").Index(i).Child("name"), v.Name))
		}
		names.Insert(v.Name)
	}
	for i, v := range r.Validations {
		if v.Reason != nil {
			switch *v.Reason {
			case metav1.StatusReasonInvalid, metav1.StatusReasonForbidden, metav1.StatusReasonUnauthorized, metav1.StatusReasonRequestEntityTooLarge:
			default:
				errs = append(errs, field.NotSupported(spec.Child("validations").Index(i).Child("reason"), *v.Reason,
					[]string{"Invalid", "Forbidden", "Unauthorized", "RequestEntityTooLarge"}))
			}
		}
	}
	return errs
}
