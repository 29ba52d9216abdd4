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

	// variables are evaluated lazily, at most once per request, in the
	// activation of every other expression of the rule. messages and
	// fieldPaths hold one entry per validation (a nil program where a
	// validation has none).
	variables       []compiledVariable
	matchConditions []compiledExpr
	validations     []compiledExpr
	messages        []compiledExpr
	fieldPaths      []compiledExpr

	// passes is the whole rule as one expression that is true exactly when
	// the rule does not apply or every validation holds: the common case
	// costs one evaluation instead of one per expression. Anything else
	// (false, an error, the cost limit) is evaluated expression by
	// expression to find what failed.
	passes cel.Program
}

// conjunction is a rule as one boolean expression: its matchConditions
// imply all its validations, so true means what it says: some condition is
// false (the rule is skipped, as any false matchCondition skips it, even
// when another fails to evaluate), or every condition and every validation
// evaluated to true. It is a conditional, not `!(conds) || (vals)`: CEL's
// || absorbs an error when the other operand is true, which would read a
// condition that fails to evaluate — a denial — as passing.
func conjunction(r Rule) string {
	var vals []string
	for _, v := range r.Validations {
		vals = append(vals, "("+v.Expression+")")
	}
	all := strings.Join(vals, " && ")
	if len(r.MatchConditions) == 0 {
		return all
	}
	return implication(conditions(r), all)
}

// implication is `(conds) ? (body) : true`, the form every rule with
// matchConditions takes (see conjunction).
func implication(conds, body string) string {
	return "(" + conds + ") ? (" + body + ") : true"
}

// conditions is the conjunction of a rule's matchConditions.
func conditions(r Rule) string {
	conds := make([]string, len(r.MatchConditions))
	for i, mc := range r.MatchConditions {
		conds[i] = "(" + mc.Expression + ")"
	}
	return strings.Join(conds, " && ")
}

// compiledExpr is one expression and its program (nil when absent).
type compiledExpr struct {
	expression string
	program    cel.Program
}

// compiledVariable is one of a rule's variables. Rules that declare the
// same variable the same way (the built-ins' "groups" and "rjs") share one
// evaluation per request through sharedKey.
type compiledVariable struct {
	name       string
	sharedKey  string
	expression string
	program    cel.Program
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
	// Variables first and in order: each is declared in the environment of
	// the expressions after it.
	for i, v := range r.Variables {
		res := compiler.CompileAndStoreVariable(namedExpr{name: v.Name, expression: v.Expression}, optionalVars, mode)
		if res.Error != nil {
			errs = append(errs, field.Invalid(spec.Child("variables").Index(i).Child("expression"), v.Expression, compileMessage(res.Error)))
			continue
		}
		cr.variables = append(cr.variables, compiledVariable{name: v.Name, sharedKey: sharedKey(r.Variables, i), expression: v.Expression, program: res.Program})
	}
	compile := func(list *field.Path, i int, child string, e plugincel.ExpressionAccessor) compiledExpr {
		res := compiler.CompileCELExpression(e, optionalVars, mode)
		if res.Error != nil {
			errs = append(errs, field.Invalid(list.Index(i).Child(child), e.GetExpression(), compileMessage(res.Error)))
		}
		return compiledExpr{expression: e.GetExpression(), program: res.Program}
	}
	for i, mc := range r.MatchConditions {
		cr.matchConditions = append(cr.matchConditions, compile(spec.Child("matchConditions"), i, "expression", boolExpr(mc.Expression)))
	}
	vals := spec.Child("validations")
	for i, v := range r.Validations {
		cr.validations = append(cr.validations, compile(vals, i, "expression", boolExpr(v.Expression)))
		var msg, paths compiledExpr
		if v.MessageExpression != "" {
			msg = compile(vals, i, "messageExpression", stringExpr(v.MessageExpression))
		}
		if v.FieldPathsExpression != "" {
			paths = compile(vals, i, "fieldPathsExpression", pathsExpr(v.FieldPathsExpression))
		}
		cr.messages = append(cr.messages, msg)
		cr.fieldPaths = append(cr.fieldPaths, paths)
	}
	if len(errs) == 0 {
		// Best effort: a rule whose conjunction does not compile is simply
		// evaluated expression by expression.
		if res := compiler.CompileCELExpression(boolExpr(conjunction(r)), optionalVars, mode); res.Error == nil {
			cr.passes = res.Program
		}
	}

	if len(errs) == 0 && tc != nil {
		errs = append(errs, tc.check(r)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cr, nil
}

// sharedKey identifies a variable by its definition: its name and
// expression, and when it reads other variables, the definitions of every
// variable before it. Two rules' variables with the same key evaluate to the
// same value for the same request.
func sharedKey(vars []shepherdv1alpha1.Variable, i int) string {
	var b strings.Builder
	from := i
	if strings.Contains(vars[i].Expression, "variables") {
		from = 0
	}
	for _, v := range vars[from : i+1] {
		b.WriteString(v.Name)
		b.WriteByte(0)
		b.WriteString(v.Expression)
		b.WriteByte(0)
	}
	return b.String()
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
