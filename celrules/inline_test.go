package celrules_test

import (
	"strings"
	"testing"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// A combined program binds each variable once, in order, and reads it
// through its binding; a later variable may use an earlier one.
func TestCombinedProgramBindsItsVariables(t *testing.T) {
	vars := [][2]string{
		{"cliques", "object.spec.template.cliques"},
		{"names", "variables.cliques.map(c, c.name)"},
	}
	got, ok := celrules.InlineVariables(vars, "variables.names.size() > 0 && variables.cliques.all(c, c.name != '')")
	if !ok {
		t.Fatal("not inlined")
	}
	want := `cel.bind(shepherdvar0, object.spec.template.cliques, cel.bind(shepherdvar1, shepherdvar0.map(c, c.name), shepherdvar1.size() > 0 && shepherdvar0.all(c, c.name != "")))`
	if got != want {
		t.Errorf("inlined:\n got %s\nwant %s", got, want)
	}
}

// Uses of `variables` other than reading a known variable leave the
// program's variables as they are.
func TestCombinedProgramKeepsVariablesItCannotBind(t *testing.T) {
	vars := [][2]string{{"a", "object.spec.a"}}
	for _, body := range []string{
		"has(variables.a)",
		"variables.?a.orValue(1) == 1",
		`variables["a"] == 1`,
		"variables.b == 1",
		"variables == {}",
		"object.spec.shepherdvar0 == variables.a",
	} {
		if got, ok := celrules.InlineVariables(vars, body); ok {
			t.Errorf("%s: inlined as %s, want it left alone", body, got)
		}
	}
}

// The built-in PodCliqueSet rules, with variables, are combined into one
// program that evaluates no variable as a program of its own.
func TestBuiltInRulesAreCombinedWithTheirVariablesBound(t *testing.T) {
	cases, e := corpusAndEngine(t)
	checked := 0
	for _, c := range cases {
		gvk := c.Object.GroupVersionKind()
		if gvk.Kind != "PodCliqueSet" || c.OperationOrDefault() != "CREATE" {
			continue
		}
		in := &celrules.Input{Operation: "CREATE", Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
			Resource: strings.ToLower(gvk.Kind) + "s", Object: c.Object.Object}
		if n := e.CombinedRules(in); n < 2 {
			t.Fatalf("%s: %d rules combined, want several", c.Name, n)
		}
		if n := e.CombinedVariables(in); n != 0 {
			t.Errorf("%s: the combined program evaluates %d variables as programs of their own, want them bound", c.Name, n)
		}
		checked++
		break
	}
	if checked == 0 {
		t.Fatal("no PodCliqueSet CREATE in the corpus")
	}
}
