package celrules

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// compiledRule is a rule ready to evaluate: the ValidatingAdmissionPolicy it
// exports as, and that policy compiled as the apiserver compiles one. It is
// immutable once built, so admissions may share it while a policy is being
// replaced.
type compiledRule struct {
	rule            Rule
	source          Source
	resourceVersion string
	action          shepherdv1alpha1.Action

	// policy is the rule as a ValidatingAdmissionPolicy (exportRule): what
	// the matcher matches and the validator runs, so the webhook, `check`
	// and the exported policy decide with one definition.
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	accessor generic.PolicyAccessor
	// validator runs matchConditions, validations and messageExpressions
	// with the apiserver's budgets and messages (validating.NewValidator).
	validator validating.Validator
	// fieldPaths holds, per validation, the evaluator of its
	// fieldPathsExpression (nil when it has none): shepherd's own addition,
	// which a ValidatingAdmissionPolicy does not have, evaluated only for a
	// validation that failed.
	fieldPaths []plugincel.ConditionEvaluator
	// onUpdate is the rule's UPDATE condition (UpdateConditionName), nil
	// when it has none.
	onUpdate matchconditions.Matcher
	// judgesUpdateOf is RuleInfo.OnUpdate, derived once here rather than
	// on every listing of the rules (the background audit lists them on
	// every pass).
	judgesUpdateOf string
	// readsNamespace is whether an expression names namespaceObject: only
	// then is the request's Namespace looked up for the validator.
	readsNamespace bool
	// groupResources are the resources the rule's matchConstraints name
	// (resources), for the candidate index.
	groupResources []schema.GroupResource
	// nsSelector is the matchConstraints' namespaceSelector, parsed once
	// (nil when absent, empty or unparsable: the matcher then decides
	// alone); see outsideNamespaces.
	nsSelector labels.Selector
	// nsRequires is the "key=value" label nsSelector requires of a
	// namespace ("" when none: requiredLabel), for the namespace index.
	nsRequires string
	// reads is what the rule's expressions read (Engine.UpdateReads).
	reads ruleReads
	// shared holds the compiled conditions this rule shares with others,
	// keeping them alive while it is (sharedConditions).
	shared []*sharedCondition
}

// pathsExpr is a fieldPathsExpression: a list of strings.
type pathsExpr string

func (e pathsExpr) GetExpression() string  { return string(e) }
func (pathsExpr) ReturnTypes() []*cel.Type { return []*cel.Type{cel.ListType(cel.StringType)} }

// baseEnv is the Kubernetes CEL environment of the running library version,
// the one a kube-apiserver of the same version compiles admission policies
// with (lists, regex, url, quantity, ip/cidr, format, optionals, ...).
var baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())

// optionalVars: shepherd evaluates without params and without an
// authorizer (the webhook cannot authorize as the requesting user), so
// expressions using them fail to compile, with the compiler's message.
var optionalVars = plugincel.OptionalVariableDeclarations{}

// sharedCompiler is the composited compiler of every rule without
// variables. Building one builds the CEL environments of every variable
// combination (the apiserver's mustBuildEnvs): a quarter of a policy's
// compile time, and most of the time it took to load 10,000
// WorkloadPolicies (issue 32). Only storing a variable changes a
// composited compiler's state; compiling with it reads it, as cel-go's
// environments may be read concurrently, so rules without variables share
// one.
var sharedCompiler = sync.OnceValues(func() (*plugincel.CompositedCompiler, error) {
	return plugincel.NewCompositedCompiler(baseEnv)
})

// compositedCompiler returns a compiler of its own for a rule with
// variables (it stores them), and otherwise a copy of sharedCompiler whose
// condition compiler compileRule may replace without touching the shared
// one (the state it shares is never written).
func compositedCompiler(variables bool) (*plugincel.CompositedCompiler, error) {
	if variables {
		return plugincel.NewCompositedCompiler(baseEnv)
	}
	shared, err := sharedCompiler()
	if err != nil {
		return nil, err
	}
	c := *shared
	return &c, nil
}

// recordingCompiler compiles conditions exactly as the apiserver's condition
// compiler does, one expression at a time, and keeps the results: the
// apiserver reports compile errors only at evaluation, while shepherd
// reports them at load time, each with its field path.
type recordingCompiler struct {
	plugincel.Compiler
	last []plugincel.CompilationResult
}

func (c *recordingCompiler) CompileCondition(exprs []plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations, mode environment.Type) plugincel.ConditionEvaluator {
	c.last = make([]plugincel.CompilationResult, len(exprs))
	for i, e := range exprs {
		if e != nil {
			c.last[i] = c.CompileCELExpression(e, opts, mode)
		}
	}
	return plugincel.NewCondition(c.last)
}

// errors returns one field error per expression of the last condition that
// did not compile: list[i].child.
func (c *recordingCompiler) errors(list *field.Path, child string) field.ErrorList {
	var errs field.ErrorList
	for i, res := range c.last {
		if res.Error != nil {
			errs = append(errs, field.Invalid(list.Index(i).Child(child), res.ExpressionAccessor.GetExpression(), compileMessage(res.Error)))
		}
	}
	return errs
}

// compileRule compiles a rule as the apiserver compiles the
// ValidatingAdmissionPolicy it exports as (validating's compilePolicy, not
// exported: a composited compiler for the variables, a matchconditions
// matcher, the validator), and type-checks it against s with the
// apiserver's TypeChecker (nil s skips type-checking). mode is
// NewExpressions for rules being loaded now and StoredExpressions when
// re-compiling already-accepted ones, as the apiserver does. Every error is
// returned at once, with the field path of the expression.
func compileRule(r Rule, source Source, mode environment.Type, s *Schemas) (*compiledRule, field.ErrorList) {
	spec := field.NewPath("spec")
	if errs := validateShape(r, spec); len(errs) > 0 {
		return nil, errs
	}
	reads := readsOfRule(&r)
	vap, _ := exportRule(r, reads, source, s)
	cr := &compiledRule{rule: r, source: source, action: r.action(), policy: vap,
		accessor: validating.NewValidatingAdmissionPolicyAccessor(vap), judgesUpdateOf: reads.onUpdate(),
		readsNamespace: mentionsNamespaceObject(vap, r), reads: reads}

	cr.groupResources = cr.resources()
	if mc := vap.Spec.MatchConstraints; mc != nil && mc.NamespaceSelector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(mc.NamespaceSelector); err == nil && !sel.Empty() {
			cr.nsSelector = sel
			cr.nsRequires, _ = requiredLabel(sel)
		}
	}

	shareable := len(vap.Spec.Variables) == 0
	comp, err := compositedCompiler(!shareable)
	if err != nil {
		return nil, field.ErrorList{field.InternalError(spec, fmt.Errorf("building the CEL environment: %w", err))}
	}
	rec := &recordingCompiler{Compiler: comp.Compiler}
	comp.ConditionCompiler = rec
	// compile is comp.CompileCondition, shared between the rules without
	// variables that compile the same expressions (sharedCondition); the
	// rule keeps what it uses alive.
	compile := func(exprs []plugincel.ExpressionAccessor) plugincel.ConditionEvaluator {
		key, ok := conditionKey(mode, exprs)
		if !shareable || !ok {
			return comp.CompileCondition(exprs, optionalVars, mode)
		}
		if sc := lookupCondition(key); sc != nil {
			rec.last = sc.results
			cr.shared = append(cr.shared, sc)
			return sc.eval
		}
		ev := comp.CompileCondition(exprs, optionalVars, mode)
		for _, res := range rec.last {
			if res.Error != nil {
				return ev // not shared: the rule will not load
			}
		}
		sc := storeCondition(key, &sharedCondition{key: key, eval: ev, results: rec.last})
		cr.shared = append(cr.shared, sc)
		return sc.eval
	}

	var errs field.ErrorList
	for i, v := range vap.Spec.Variables {
		res := comp.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, optionalVars, mode)
		if res.Error != nil {
			errs = append(errs, field.Invalid(spec.Child("variables").Index(i).Child("expression"), v.Expression, compileMessage(res.Error)))
		}
	}
	// The UPDATE condition (updateCondition, last when present) gets a
	// matcher of its own, run on UPDATEs only: on every other request it
	// is true, and evaluating it there would cost every rule a CEL
	// activation per request for nothing.
	var matcher matchconditions.Matcher
	conds := make([]plugincel.ExpressionAccessor, 0, len(vap.Spec.MatchConditions))
	for i := range vap.Spec.MatchConditions {
		mc := (*matchconditions.MatchCondition)(&vap.Spec.MatchConditions[i])
		if mc.Name == UpdateConditionName {
			filter := compile([]plugincel.ExpressionAccessor{mc})
			errs = append(errs, rec.errors(spec.Child("matchConditions").Index(i), "expression")...)
			cr.onUpdate = matchconditions.NewMatcher(filter, vap.Spec.FailurePolicy, "policy", "validate", vap.Name)
			continue
		}
		conds = append(conds, mc)
	}
	if len(conds) > 0 {
		filter := compile(conds)
		errs = append(errs, rec.errors(spec.Child("matchConditions"), "expression")...)
		matcher = matchconditions.NewMatcher(filter, vap.Spec.FailurePolicy, "policy", "validate", vap.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(vap.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(vap.Spec.Validations))
	for i, v := range vap.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	vals := spec.Child("validations")
	validationFilter := compile(validations)
	errs = append(errs, rec.errors(vals, "expression")...)
	messageFilter := compile(messages)
	errs = append(errs, rec.errors(vals, "messageExpression")...)
	cr.fieldPaths = make([]plugincel.ConditionEvaluator, len(r.Validations))
	for i, v := range r.Validations {
		if v.FieldPathsExpression == "" {
			continue
		}
		cr.fieldPaths[i] = compile([]plugincel.ExpressionAccessor{pathsExpr(v.FieldPathsExpression)})
		if err := rec.last[0].Error; err != nil {
			errs = append(errs, field.Invalid(vals.Index(i).Child("fieldPathsExpression"), v.FieldPathsExpression, compileMessage(err)))
		}
	}
	cr.validator = validating.NewValidator(validationFilter, matcher, comp.CompileCondition(nil, optionalVars, mode), messageFilter, vap.Spec.FailurePolicy, nil)

	if len(errs) == 0 && s != nil {
		errs = append(errs, typeCheck(r, vap, s)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cr, nil
}

// typeCheck type-checks every expression of a rule against the schemas of
// the kinds its policy matches with the apiserver's own TypeChecker (what
// fills a ValidatingAdmissionPolicy's status.typeChecking), extended to the
// expressions the apiserver's Check leaves out (variables, matchConditions,
// fieldPathsExpression): a misspelled field anywhere is a load error.
func typeCheck(r Rule, vap *admissionregistrationv1.ValidatingAdmissionPolicy, s *Schemas) field.ErrorList {
	tc := &validating.TypeChecker{SchemaResolver: s, RestMapper: s.RESTMapper()}
	ctx := s.typeContext(tc, vap)
	spec := field.NewPath("spec")
	var errs field.ErrorList
	check := func(p *field.Path, expr string) {
		if expr == "" {
			return
		}
		if res := tc.CheckExpression(ctx, expr); len(res) > 0 {
			errs = append(errs, field.Invalid(p, expr, "type-check failed: "+strings.TrimSpace(res.String())))
		}
	}
	for i, v := range r.Variables {
		check(spec.Child("variables").Index(i).Child("expression"), v.Expression)
	}
	for i, mc := range r.MatchConditions {
		check(spec.Child("matchConditions").Index(i).Child("expression"), mc.Expression)
	}
	for i, v := range r.Validations {
		p := spec.Child("validations").Index(i)
		check(p.Child("expression"), v.Expression)
		check(p.Child("messageExpression"), v.MessageExpression)
		check(p.Child("fieldPathsExpression"), v.FieldPathsExpression)
	}
	return errs
}

// maxTypeContexts bounds the type-checking contexts one Schemas keeps: a
// context per distinct set of matched resources, of which rules have few.
const maxTypeContexts = 64

// typeContext returns tc's context for vap, shared by every rule without
// variables that matches the same resources. Creating one turns the schema
// of every kind vap matches into CEL types (the apiserver's
// TypeChecker.CreateContext), which was a sixth of what admitting a
// WorkloadPolicy allocated with 10,000 of them applied at once
// (test/faults); it depends only on the kinds matched, the schemas and
// the rule's variables. A rule with variables gets a context of its own:
// variables are part of it, and keeping one per rule would not be bounded.
func (s *Schemas) typeContext(tc *validating.TypeChecker, vap *admissionregistrationv1.ValidatingAdmissionPolicy) *validating.TypeCheckingContext {
	mc := vap.Spec.MatchConstraints
	if len(vap.Spec.Variables) > 0 || vap.Spec.ParamKind != nil || mc == nil {
		return tc.CreateContext(vap)
	}
	// What CreateContext reads of the rules: their groups, versions and
	// resources (not operations, scope or names).
	var key strings.Builder
	for _, rr := range mc.ResourceRules {
		fmt.Fprintf(&key, "%q %q %q;", rr.APIGroups, rr.APIVersions, rr.Resources)
	}
	s.typeContextsMu.Lock()
	ctx, ok := s.typeContexts[key.String()]
	s.typeContextsMu.Unlock()
	if ok {
		return ctx
	}
	ctx = tc.CreateContext(vap)
	s.typeContextsMu.Lock()
	defer s.typeContextsMu.Unlock()
	if s.typeContexts == nil {
		s.typeContexts = map[string]*validating.TypeCheckingContext{}
	}
	if len(s.typeContexts) < maxTypeContexts {
		s.typeContexts[key.String()] = ctx
	}
	return ctx
}

// compileMessage turns a CEL compile error into a one-paragraph message.
func compileMessage(err error) string {
	return strings.TrimSpace(err.Error())
}

var validOperations = sets.New("CREATE", "UPDATE", "DELETE", "CONNECT", "*")

// fieldPathSyntax is a field path as shepherd reports it: dotted field
// names with optional list indexes or quoted map keys,
// "spec.replicatedJobs[0].template" or "metadata.labels['app']".
var fieldPathSyntax = regexp.MustCompile(`^\.?[A-Za-z_$][A-Za-z0-9_$-]*(\.[A-Za-z_$][A-Za-z0-9_$-]*|\[[0-9]+\]|\['[^'\\]*'\])*$`)

// validateShape checks what the CRD schema cannot: the parts of a rule the
// compiler does not see, and what shepherd's webhook can never be asked
// (scopeErrors).
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
	if len(r.MatchConditions) >= maxMatchConditions {
		errs = append(errs, field.TooMany(spec.Child("matchConditions"), len(r.MatchConditions), maxMatchConditions-1))
	}
	for i, mc := range r.MatchConditions {
		if mc.Name == UpdateConditionName {
			errs = append(errs, field.Invalid(spec.Child("matchConditions").Index(i).Child("name"), mc.Name, "reserved: shepherd adds the condition of this name itself (the rule is evaluated on UPDATE only when the update changes what it reads); rename it"))
		}
	}
	for i, v := range r.Variables {
		if v.Name == ExemptVariable {
			errs = append(errs, field.Invalid(spec.Child("variables").Index(i).Child("name"), v.Name, "reserved: an exported policy exempts the objects of a PolicyException with a variable of this name; rename it"))
		}
	}
	if len(r.Match.Resources) == 0 {
		errs = append(errs, field.Required(spec.Child("match", "resources"), "list the kinds or resources the rule applies to"))
	}
	for i, rr := range r.Match.Resources {
		p := spec.Child("match", "resources").Index(i)
		if len(rr.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "name the API group of the kinds, e.g. trainer.kubeflow.org"))
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
	if len(errs) == 0 {
		errs = append(errs, scopeErrors(r, spec)...)
	}
	for _, sel := range []struct {
		name string
		ls   *metav1.LabelSelector
	}{{"namespaceSelector", r.Match.NamespaceSelector}, {"objectSelector", r.Match.ObjectSelector}} {
		if sel.ls == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel.ls); err != nil {
			errs = append(errs, field.Invalid(spec.Child("match", sel.name), sel.ls, err.Error()))
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
		p := spec.Child("validations").Index(i)
		if v.Reason != nil {
			switch *v.Reason {
			case metav1.StatusReasonInvalid, metav1.StatusReasonForbidden, metav1.StatusReasonUnauthorized, metav1.StatusReasonRequestEntityTooLarge:
			default:
				errs = append(errs, field.NotSupported(p.Child("reason"), *v.Reason,
					[]string{"Invalid", "Forbidden", "Unauthorized", "RequestEntityTooLarge"}))
			}
		}
		if v.FieldPath != "" && !fieldPathSyntax.MatchString(v.FieldPath) {
			errs = append(errs, field.Invalid(p.Child("fieldPath"), v.FieldPath,
				"not a field path: write dotted field names with list indexes or quoted map keys, e.g. spec.replicatedJobs[0].template or metadata.labels['app']"))
		}
	}
	return errs
}

// mentionsNamespaceObject reports whether any of the rule's expressions
// (the exported policy's and shepherd's fieldPathsExpressions) names the
// namespaceObject variable. A rule that never does is evaluated without
// looking the request's Namespace up; the test is on the text, so a
// mention anywhere, even in a string, only costs that lookup.
func mentionsNamespaceObject(vap *admissionregistrationv1.ValidatingAdmissionPolicy, r Rule) bool {
	for _, v := range vap.Spec.Validations {
		if strings.Contains(v.Expression, namespaceObjectVar) || strings.Contains(v.MessageExpression, namespaceObjectVar) {
			return true
		}
	}
	for _, v := range vap.Spec.Variables {
		if strings.Contains(v.Expression, namespaceObjectVar) {
			return true
		}
	}
	for _, m := range vap.Spec.MatchConditions {
		if strings.Contains(m.Expression, namespaceObjectVar) {
			return true
		}
	}
	for _, a := range vap.Spec.AuditAnnotations {
		if strings.Contains(a.ValueExpression, namespaceObjectVar) {
			return true
		}
	}
	for _, v := range r.Validations {
		if strings.Contains(v.FieldPathsExpression, namespaceObjectVar) {
			return true
		}
	}
	return false
}

// namespaceObjectVar is the CEL variable of the request's Namespace.
const namespaceObjectVar = "namespaceObject"
