package celrules

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/parser"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// bindingsEnv is baseEnv with cel.bind, for combined programs only: rules
// are still compiled, and exported, against baseEnv alone.
var bindingsEnv = func() *environment.EnvSet {
	e, err := baseEnv.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{ext.Bindings()},
	})
	if err != nil {
		panic(fmt.Sprintf("adding cel.bind to the CEL environment: %v", err))
	}
	return e
}()

// bindingPrefix names the identifiers variables are bound to.
const bindingPrefix = "shepherdvar"

// inlineVariables rewrites a combined program so that it evaluates its
// variables itself: `cel.bind(shepherdvar0, <vars[0]>, cel.bind(...,
// <body>))`, every `variables.NAME` replaced by NAME's identifier. Each
// variable evaluated as a program of its own costs cel-go an execution
// frame, a cost tracker and a context — more than most variables' own
// evaluation — and a combined program is evaluated on every admission.
//
// cel.bind evaluates a variable once, where it is bound; an error there is
// a value that fails only what uses it, as with the lazily evaluated
// `variables`. ok is false when a source uses `variables` any other way
// (has(variables.x), variables.?x, variables["x"]) or already uses the
// identifiers the binding would take: the program then keeps its variables.
func inlineVariables(vars []compiledVariable, body string) (src string, ok bool) {
	if strings.Contains(body, bindingPrefix) {
		return "", false
	}
	ids := make(map[string]string, len(vars))
	for i, v := range vars {
		if strings.Contains(v.expression, bindingPrefix) {
			return "", false
		}
		ids[v.name] = fmt.Sprint(bindingPrefix, i)
	}
	inits := make([]string, len(vars))
	for i, v := range vars {
		if inits[i], ok = replaceVariables(v.expression, ids); !ok {
			return "", false
		}
	}
	if src, ok = replaceVariables(body, ids); !ok {
		return "", false
	}
	for i := len(vars) - 1; i >= 0; i-- {
		src = "cel.bind(" + ids[vars[i].name] + ", " + inits[i] + ", " + src + ")"
	}
	return src, true
}

// replaceVariables replaces each `variables.NAME` in expr by ids[NAME].
func replaceVariables(expr string, ids map[string]string) (string, bool) {
	parsed, errs := macrolessParser.Parse(common.NewTextSource(expr))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return "", false
	}
	fac := ast.NewExprFactory()
	ok := true
	// Pre-order: a replaced select becomes an identifier, whose operand is
	// then not visited.
	ast.PreOrderVisit(parsed.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			if !usesVariables(e) {
				return
			}
			sel := e.AsSelect()
			id, known := ids[sel.FieldName()]
			if !known || sel.IsTestOnly() {
				ok = false
				return
			}
			e.SetKindCase(fac.NewIdent(e.ID(), id))
		case ast.IdentKind:
			// Any use of `variables` left is one this rewrite does not
			// understand.
			if e.AsIdent() == plugincel.VariableVarName {
				ok = false
			}
		case ast.CallKind:
			// has(variables.x) is a call in an unexpanded parse.
			if c := e.AsCall(); c.FunctionName() == "has" && len(c.Args()) == 1 && usesVariables(c.Args()[0]) {
				ok = false
			}
		}
	}))
	if !ok {
		return "", false
	}
	out, err := parser.Unparse(parsed.Expr(), parsed.SourceInfo())
	if err != nil {
		return "", false
	}
	return out, true
}

// usesVariables reports whether e is `variables.NAME`.
func usesVariables(e ast.Expr) bool {
	return e.Kind() == ast.SelectKind && e.AsSelect().Operand().Kind() == ast.IdentKind &&
		e.AsSelect().Operand().AsIdent() == plugincel.VariableVarName
}
