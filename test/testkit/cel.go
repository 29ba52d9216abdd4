package testkit

import (
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apiserver/pkg/cel/environment"
)

// EvalCEL evaluates expr over the variables an admission policy has
// (object, oldObject, namespaceObject, variables, and any other variable
// vars names; those vars leaves out are unbound), in the apiserver's own
// CEL environment for stored expressions (its libraries: strings, lists,
// regex, optionals): the CEL a rule or an export writes, checked without
// an apiserver. A nil object is CEL's null, as for a DELETE's object.
func EvalCEL(t testing.TB, expr string, vars map[string]any) ref.Val {
	t.Helper()
	decls := []cel.EnvOption{cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType))}
	for name := range vars {
		switch name {
		case "object", "oldObject", "namespaceObject", "variables":
		default:
			decls = append(decls, cel.Variable(name, cel.DynType))
		}
	}
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err := base.Extend(decls...)
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compiling %s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := prg.Eval(vars)
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}
