package celrules

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/openapi"
)

// typeChecker type-checks rules against the structural schemas of the kinds
// they match, the way a kube-apiserver fills in a ValidatingAdmissionPolicy's
// status.typeChecking: object and oldObject typed from the schema, request
// and namespaceObject from their hand-made types, variables composed in
// order. Unlike the apiserver's checker it builds the typed environment once
// per kind, not once per expression, which keeps loading the library fast.
type typeChecker struct {
	schemas *Schemas

	mu   sync.Mutex
	envs map[schema.GroupVersionKind]*environment.EnvSet
}

func newTypeChecker(s *Schemas) *typeChecker {
	return &typeChecker{schemas: s, envs: map[schema.GroupVersionKind]*environment.EnvSet{}}
}

// gvks lists the kinds (every served version) a rule matches that shepherd
// has a schema for; kinds without one are not type-checked, as in the
// apiserver.
func (tc *typeChecker) gvks(r Rule) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	add := func(gk schema.GroupKind) {
		for _, v := range tc.schemas.Versions(gk) {
			if gvk := gk.WithVersion(v); !slices.Contains(out, gvk) {
				out = append(out, gvk)
			}
		}
	}
	for _, rr := range r.Match.Resources {
		for _, g := range rr.APIGroups {
			for _, k := range rr.Kinds {
				add(schema.GroupKind{Group: g, Kind: k})
			}
			for _, res := range rr.Resources {
				if k, ok := tc.schemas.KindForResource(schema.GroupResource{Group: g, Resource: res}); ok {
					add(schema.GroupKind{Group: g, Kind: k})
				}
			}
		}
	}
	return out
}

// env returns the environment with object and oldObject typed as gvk.
func (tc *typeChecker) env(gvk schema.GroupVersionKind) (*environment.EnvSet, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if e, ok := tc.envs[gvk]; ok {
		return e, nil
	}
	s, err := tc.schemas.ResolveSchema(gvk)
	if err != nil {
		return nil, err
	}
	decl := common.SchemaDeclType(&openapi.Schema{Schema: s}, true)
	if decl == nil {
		return nil, fmt.Errorf("schema of %v has no CEL type", gvk)
	}
	decl = decl.MaybeAssignTypeName(strings.ReplaceAll(gvk.Group, ".", "_") + "_" + gvk.Version + "_" + gvk.Kind)
	requestType := plugincel.BuildRequestType()
	namespaceType := plugincel.BuildNamespaceType()
	e, err := baseEnv.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(plugincel.NamespaceVarName, namespaceType.CelType()),
			cel.Variable(plugincel.RequestVarName, requestType.CelType()),
			cel.Variable(plugincel.ObjectVarName, decl.CelType()),
			cel.Variable(plugincel.OldObjectVarName, decl.CelType()),
			cel.Variable(plugincel.ParamsVarName, cel.DynType),
			cel.Variable(plugincel.AuthorizerVarName, library.AuthorizerType),
		},
		DeclTypes: []*apiservercel.DeclType{namespaceType, requestType, decl},
	})
	if err != nil {
		return nil, fmt.Errorf("building the typed CEL environment of %v: %w", gvk, err)
	}
	tc.envs[gvk] = e
	return e, nil
}

// typeOnlyCompiler compiles without building a program: only the types
// matter here.
type typeOnlyCompiler struct{ c *plugincel.CompositedCompiler }

func (t typeOnlyCompiler) CompileCELExpression(e plugincel.ExpressionAccessor, _ plugincel.OptionalVariableDeclarations, mode environment.Type) plugincel.CompilationResult {
	env, err := t.c.Env(mode)
	if err != nil {
		return plugincel.CompilationResult{ExpressionAccessor: e, Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: err.Error()}}
	}
	ast, issues := env.Compile(e.GetExpression())
	if issues != nil {
		return plugincel.CompilationResult{ExpressionAccessor: e, Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: issues.String()}}
	}
	return plugincel.CompilationResult{ExpressionAccessor: e, OutputType: ast.OutputType()}
}

// check returns one error per expression that does not type-check against
// some kind the rule matches, with the expression's field path and the
// checker's message (kind, line and column).
func (tc *typeChecker) check(r Rule) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	reported := map[string]bool{}
	for _, gvk := range tc.gvks(r) {
		envSet, err := tc.env(gvk)
		if err != nil {
			errs = append(errs, field.InternalError(spec, err))
			continue
		}
		comp, err := plugincel.NewCompositedCompilerForTypeChecking(envSet)
		if err != nil {
			errs = append(errs, field.InternalError(spec, err))
			continue
		}
		comp.Compiler = typeOnlyCompiler{comp}
		checkOne := func(p *field.Path, expr string) {
			if expr == "" || reported[p.String()] {
				return
			}
			if res := comp.CompileCELExpression(boolExpr(expr), optionalVars, environment.StoredExpressions); res.Error != nil {
				reported[p.String()] = true
				errs = append(errs, field.Invalid(p, expr, fmt.Sprintf("type-check against %s failed: %s", gvk, strings.TrimSpace(res.Error.Detail))))
			}
		}
		for i, v := range r.Variables {
			p := spec.Child("variables").Index(i).Child("expression")
			checkOne(p, v.Expression)
			comp.CompileAndStoreVariable(namedExpr{name: v.Name, expression: v.Expression}, optionalVars, environment.StoredExpressions)
		}
		for i, mc := range r.MatchConditions {
			checkOne(spec.Child("matchConditions").Index(i).Child("expression"), mc.Expression)
		}
		for i, v := range r.Validations {
			p := spec.Child("validations").Index(i)
			checkOne(p.Child("expression"), v.Expression)
			checkOne(p.Child("messageExpression"), v.MessageExpression)
			checkOne(p.Child("fieldPathsExpression"), v.FieldPathsExpression)
		}
	}
	return errs
}
