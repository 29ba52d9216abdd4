package celrules

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// The defaulting rules run in-process as the MutatingAdmissionPolicies
// `shepherd export map` writes (ExportDefaults), compiled and applied with
// the apiserver's own mutating machinery — its CEL compiler for variables,
// matchConditions and JSON patches, and patch.NewJSONPatcher to apply them —
// exactly as the validating rules run as the ValidatingAdmissionPolicies
// they export as. There is one definition of each default: what the webhook
// and `shepherd check` do and what a cluster running the exported policies
// does agree by construction.

// compiledDefault is one defaulting rule's MutatingAdmissionPolicy compiled
// as the apiserver compiles one (mutating.compilePolicy, which the
// apiserver does not export): immutable once built.
type compiledDefault struct {
	id   string
	kind schema.GroupKind
	// warning is what the webhook tells the user when the rule changed the
	// object (a MutatingAdmissionPolicy cannot warn; the webhook can).
	warning string
	// compiler holds the compiled variables: each application runs in a
	// composition context of its own (CreateContext), as the apiserver's
	// dispatcher gives each policy invocation.
	compiler  *plugincel.CompositedCompiler
	matcher   matchconditions.Matcher
	mutations []jsonPatchMutation
}

// jsonPatchMutation is one JSON patch of a policy: its expression, and the
// apiserver's patcher that applies what the expression returns.
type jsonPatchMutation struct {
	expr    *evaluated
	patcher patch.Patcher
}

// evaluated is a patch expression whose result Default reads before the
// patcher does: most patches of an object that is already defaulted are
// empty, and the patcher would encode and decode the whole object to apply
// nothing (three quarters of defaulting's cost, BenchmarkAdmitPodCliqueSet).
// The result is handed to the patcher through the context, so the
// expression is evaluated once either way.
type evaluated struct {
	plugincel.MutatingEvaluator
}

// evaluation carries one evaluation from Default to the patcher.
type evaluation struct {
	result    plugincel.EvaluationResult
	remaining int64
}

type evaluationKey struct{}

func (e *evaluated) ForInput(ctx context.Context, va *admission.VersionedAttributes, req *admissionv1.AdmissionRequest, vars plugincel.OptionalVariableBindings, ns *corev1.Namespace, budget int64) (plugincel.EvaluationResult, int64, error) {
	if done, ok := ctx.Value(evaluationKey{}).(*evaluation); ok {
		return done.result, done.remaining, nil
	}
	return e.MutatingEvaluator.ForInput(ctx, va, req, vars, ns, budget)
}

// compileDefaults compiles the policies ExportDefaults writes for cfg (its
// schemas decide the knobs' forms): the rules that would change nothing
// there, or do not type-check, are left out as they are from the export.
func compileDefaults(cfg Config) ([]*compiledDefault, error) {
	policies, _, _, err := ExportDefaults(cfg)
	if err != nil {
		return nil, err
	}
	byID := map[string]mapdefault.Rule{}
	for _, r := range integrations.Defaults() {
		byID[r.ID] = r
	}
	out := make([]*compiledDefault, 0, len(policies))
	for _, p := range policies {
		r := byID[p.Labels[LabelRule]]
		cd, err := compileDefault(p)
		if err != nil {
			return nil, fmt.Errorf("compiling %s's MutatingAdmissionPolicy: %w", r.ID, err)
		}
		cd.id, cd.kind, cd.warning = r.ID, r.Kind, r.Warning
		out = append(out, cd)
	}
	return out, nil
}

// compileDefault compiles p's variables, matchConditions and JSON patches
// with the environment and options the apiserver's mutating admission
// plugin uses (no params, an authorizer, the patch types).
func compileDefault(p *admissionregistrationv1.MutatingAdmissionPolicy) (*compiledDefault, error) {
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	// The base environment, and for a policy without variables the
	// compiler, are the validating rules' (compile.go): building either
	// anew per policy cost serve about 16 MiB (make bench-admission).
	compiler, err := compositedCompiler(len(p.Spec.Variables) > 0)
	if err != nil {
		return nil, err
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(vars, opts, environment.StoredExpressions)
	conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for i := range p.Spec.MatchConditions {
		conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
	}
	filter := compiler.CompileCondition(conds, opts, environment.StoredExpressions)
	errs := filter.CompilationErrors()
	cd := &compiledDefault{compiler: compiler, matcher: matchconditions.NewMatcher(filter, p.Spec.FailurePolicy, "policy", "mutate", p.Name)}
	patchOpts := opts
	patchOpts.HasPatchTypes = true
	for _, m := range p.Spec.Mutations {
		if m.PatchType != admissionregistrationv1.PatchTypeJSONPatch || m.JSONPatch == nil {
			return nil, fmt.Errorf("mutation of type %q: the defaults are JSON patches", m.PatchType)
		}
		ev := &evaluated{compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOpts, environment.StoredExpressions)}
		errs = append(errs, ev.CompilationErrors()...)
		cd.mutations = append(cd.mutations, jsonPatchMutation{ev, patch.NewJSONPatcher(ev)})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cd, nil
}

// Defaulted is the outcome of Engine.Default.
type Defaulted struct {
	// Object is the defaulted object: the one given when no rule changed
	// it, else a new one (the given object is never modified).
	Object map[string]any
	// Changed lists the rules that changed the object, in table order, and
	// Warnings their warnings.
	Changed  []string
	Warnings []RuleWarning
}

// RuleWarning is a warning of a rule.
type RuleWarning struct {
	Rule, Message string
}

// DefaultError is a defaulting rule that could not be applied (an
// expression failed or ran out of budget): its policy's failurePolicy is
// Fail, so the apiserver would deny the request.
type DefaultError struct {
	Rule string
	Err  error
}

func (e *DefaultError) Error() string {
	return fmt.Sprintf("rule %s could not be applied: %v", e.Rule, e.Err)
}

func (e *DefaultError) Unwrap() error { return e.Err }

// Default applies the defaulting rules of in's kind that enabled allows (a
// PolicyException switches one off for the objects it selects), in table
// order, each to the object the previous ones left, as the apiserver
// applies MutatingAdmissionPolicies: the matchConditions decide, then each
// JSON patch is applied with the runtime budget of one policy.
func (e *Engine) Default(ctx context.Context, in *Input, enabled func(id string) bool) (*Defaulted, error) {
	out := &Defaulted{Object: in.Object}
	e.mu.RLock()
	defaults := e.defaults
	e.mu.RUnlock()
	var r *request
	var va *admission.VersionedAttributes
	var areq *admissionv1.AdmissionRequest
	mr := schema.GroupVersionResource{Group: in.Group, Version: in.Version, Resource: in.Resource}
	for _, d := range defaults {
		if d.kind.Group != in.Group || d.kind.Kind != in.Kind || !enabled(d.id) || out.Object == nil {
			continue
		}
		if r == nil {
			r = newRequest(ctx, in)
			va = r.versionedAttributes(schema.GroupVersionKind{Group: in.Group, Version: in.Version, Kind: in.Kind})
			// The request variable is built from the attributes, not the
			// object, so one serves every policy.
			areq = plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(mr), metav1.GroupVersionKind(va.VersionedKind))
		}
		pctx := d.compiler.CreateContext(ctx)
		m := d.matcher.Match(pctx, va, nil, nil)
		if m.Error != nil {
			return nil, &DefaultError{Rule: d.id, Err: m.Error}
		}
		if !m.Matches {
			continue
		}
		before := va.VersionedObject.Object()
		for _, mu := range d.mutations {
			res, remaining, err := mu.expr.MutatingEvaluator.ForInput(pctx, va, areq, plugincel.OptionalVariableBindings{}, nil, celconfig.RuntimeCELCostBudget)
			if err == nil && res.Error != nil {
				err = res.Error
			}
			if err != nil {
				return nil, &DefaultError{Rule: d.id, Err: err}
			}
			if l, ok := res.EvalResult.(traits.Lister); ok && l.Size() == celtypes.IntZero {
				continue // nothing to patch
			}
			obj, err := mu.patcher.Patch(context.WithValue(pctx, evaluationKey{}, &evaluation{res, remaining}), patch.Request{
				MatchedResource:     mr,
				VersionedAttributes: va,
				ObjectInterfaces:    objectInterfaces,
			}, celconfig.RuntimeCELCostBudget)
			if err != nil {
				return nil, &DefaultError{Rule: d.id, Err: err}
			}
			if obj != va.VersionedObject.Object() {
				va.UpdateObject(obj)
			}
		}
		if after := va.VersionedObject.Object(); after != before {
			u := after.(*unstructured.Unstructured).Object
			if !reflect.DeepEqual(u, out.Object) {
				out.Object = u
				out.Changed = append(out.Changed, d.id)
				if d.warning != "" {
					out.Warnings = append(out.Warnings, RuleWarning{Rule: d.id, Message: d.warning})
				}
			}
		}
	}
	return out, nil
}
