package celrules

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	celtypes "github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"
	"k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
)

// typeCheckMAP type-checks a MutatingAdmissionPolicy of kind gk against
// each served version of its schema in s (TypeCheckMutatingPolicy).
func typeCheckMAP(p *admissionregistrationv1.MutatingAdmissionPolicy, gk schema.GroupKind, s *Schemas) field.ErrorList {
	var gvks []schema.GroupVersionKind
	for _, v := range s.Versions(gk) {
		gvks = append(gvks, gk.WithVersion(v))
	}
	return TypeCheckMutatingPolicy(p, s, gvks)
}

// TypeCheckMutatingPolicy type-checks every expression of a
// MutatingAdmissionPolicy against the schemas r resolves for gvks (the
// kinds its matchConstraints match), as validating.TypeChecker does for a
// ValidatingAdmissionPolicy: the apiserver has no type checker for
// mutating policies (it compiles them with an untyped object, and a
// misspelled field fails the requests it breaks). The environment is the
// apiserver's for mutations — its base environment, request,
// namespaceObject, authorizer, the JSONPatch and Object types and
// jsonpatch.escapeKey — with object and oldObject typed by the schema;
// variables, matchConditions (bool) and JSON patches (a list of JSONPatch)
// are compiled in order, each error with its field path. r is a cluster's
// published schemas (resolver.ClientDiscoveryResolver) or CRD files
// (Schemas).
func TypeCheckMutatingPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy, r resolver.SchemaResolver, gvks []schema.GroupVersionKind) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	for _, gvk := range gvks {
		sch, err := r.ResolveSchema(gvk)
		if err != nil {
			errs = append(errs, field.InternalError(spec, fmt.Errorf("resolving the schema of %v: %w", gvk, err)))
			continue
		}
		decl := common.SchemaDeclType(&openapi.Schema{Schema: sch}, true)
		if decl == nil {
			errs = append(errs, field.InternalError(spec, fmt.Errorf("no CEL type for the schema of %v", gvk)))
			continue
		}
		// A type name of its own per kind and version, as the apiserver's
		// type checker gives one.
		decl = decl.MaybeAssignTypeName("shepherd_" + gvk.Kind + "_" + gvk.Version)
		envSet, err := mutationTypeCheckEnv(decl)
		if err != nil {
			errs = append(errs, field.InternalError(spec, err))
			continue
		}
		comp, err := plugincel.NewCompositedCompilerForTypeChecking(envSet)
		if err != nil {
			errs = append(errs, field.InternalError(spec, err))
			continue
		}
		tc := &typedCompiler{comp: comp}
		comp.Compiler = tc
		at := func(p *field.Path, expr string, res plugincel.CompilationResult) {
			if res.Error != nil {
				errs = append(errs, field.Invalid(p, expr, fmt.Sprintf("%v: %s", gvk, strings.TrimSpace(res.Error.Error()))))
			}
		}
		for i, va := range p.Spec.Variables {
			at(spec.Child("variables").Index(i).Child("expression"), va.Expression,
				comp.CompileAndStoreVariable(&validating.Variable{Name: va.Name, Expression: va.Expression}, plugincel.OptionalVariableDeclarations{}, environment.NewExpressions))
		}
		for i, mc := range p.Spec.MatchConditions {
			at(spec.Child("matchConditions").Index(i).Child("expression"), mc.Expression, tc.compile(mc.Expression, cel.BoolType))
		}
		for i, m := range p.Spec.Mutations {
			mp := spec.Child("mutations").Index(i)
			switch {
			case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
				at(mp.Child("jsonPatch", "expression"), m.JSONPatch.Expression, tc.compile(m.JSONPatch.Expression, cel.ListType(jsonPatchType)))
			default:
				errs = append(errs, field.NotSupported(mp.Child("patchType"), m.PatchType, []string{string(admissionregistrationv1.PatchTypeJSONPatch)}))
			}
		}
	}
	return errs
}

var jsonPatchType = celtypes.NewObjectType(mutation.JSONPatchTypeName)

// mutationTypeCheckEnv is the apiserver's environment for the expressions
// of a MutatingAdmissionPolicy (plugincel's, with its patch types) with
// object and oldObject of the given type instead of dyn.
func mutationTypeCheckEnv(object *apiservercel.DeclType) (*environment.EnvSet, error) {
	request := plugincel.BuildRequestType()
	namespace := plugincel.BuildNamespaceType()
	typed, err := baseEnv.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(plugincel.ObjectVarName, object.CelType()),
			cel.Variable(plugincel.OldObjectVarName, object.CelType()),
			cel.Variable(plugincel.NamespaceVarName, namespace.CelType()),
			cel.Variable(plugincel.RequestVarName, request.CelType()),
			cel.Variable(plugincel.AuthorizerVarName, library.AuthorizerType),
			cel.Variable(plugincel.RequestResourceAuthorizerVarName, library.ResourceCheckType),
		},
		DeclTypes: []*apiservercel.DeclType{namespace, request, object},
	})
	if err != nil {
		return nil, err
	}
	// A second extension, as the apiserver adds them: the patch types'
	// resolver wraps the type provider that has the declared types.
	return typed.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			common.ResolverEnvOption(&mutation.DynamicTypeResolver{}),
			environment.UnversionedLib(library.JSONPatch),
		},
	})
}

// typedCompiler compiles in the composited environment (typed object and
// the variables compiled so far) and checks the result type as the
// apiserver's compiler does; it builds no program.
type typedCompiler struct {
	comp *plugincel.CompositedCompiler
}

func (c *typedCompiler) CompileCELExpression(e plugincel.ExpressionAccessor, _ plugincel.OptionalVariableDeclarations, mode environment.Type) plugincel.CompilationResult {
	return c.compileIn(e.GetExpression(), mode, nil, e)
}

func (c *typedCompiler) compile(expr string, want *cel.Type) plugincel.CompilationResult {
	return c.compileIn(expr, environment.NewExpressions, want, nil)
}

func (c *typedCompiler) compileIn(expr string, mode environment.Type, want *cel.Type, accessor plugincel.ExpressionAccessor) plugincel.CompilationResult {
	fail := func(detail string) plugincel.CompilationResult {
		return plugincel.CompilationResult{Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: detail}, ExpressionAccessor: accessor}
	}
	env, err := c.comp.Env(mode)
	if err != nil {
		return plugincel.CompilationResult{Error: &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: err.Error()}}
	}
	ast, issues := env.Compile(expr)
	if issues != nil {
		return fail("type-check failed: " + issues.String())
	}
	if want != nil && !ast.OutputType().IsExactType(want) {
		return fail(fmt.Sprintf("must evaluate to %v but got %v", want, ast.OutputType()))
	}
	return plugincel.CompilationResult{OutputType: ast.OutputType(), ExpressionAccessor: accessor}
}

var _ plugincel.Compiler = (*typedCompiler)(nil)
