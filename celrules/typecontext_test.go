package celrules

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// freshSchemas is a Schemas of its own (seedSchemas is shared), for the
// tests of what a Schemas keeps.
func freshSchemas(t *testing.T) *Schemas {
	t.Helper()
	crds, err := pinned.Read("../test/seedcrds", "../deploy/crds")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSchemas(crds, "the seed-shaped CRDs")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The rules without variables that match the same resources share one
// type-checking context, and each is still type-checked against the kind
// it matches: a field misspelled for that kind fails even when the
// context came from an earlier rule, and a TrainJob field read of a
// TrainingRuntime (same group, another resource) fails. A rule with
// variables gets a context of its own.
func TestTypeContextSharedByRulesWithoutVariables(t *testing.T) {
	s := freshSchemas(t)
	compile := func(r Rule) string {
		t.Helper()
		_, errs := compileRule(r, SourcePolicy, environment.NewExpressions, s)
		if len(errs) == 0 {
			return ""
		}
		return errs.ToAggregate().Error()
	}
	kept := func() int {
		s.typeContextsMu.Lock()
		defer s.typeContextsMu.Unlock()
		return len(s.typeContexts)
	}
	runtimeRule := func(id, expr string) Rule {
		r := trainJobRule(id, shepherdv1alpha1.Validation{Expression: expr})
		r.Match.Resources[0].Kinds = []string{"TrainingRuntime"}
		return r
	}

	if msg := compile(trainJobRule("good", shepherdv1alpha1.Validation{Expression: "object.spec.trainer.numNodes > 0"})); msg != "" {
		t.Fatalf("a well-typed TrainJob rule: %s", msg)
	}
	if got := kept(); got != 1 {
		t.Fatalf("%d contexts kept after one TrainJob rule, want 1", got)
	}
	if msg := compile(trainJobRule("typo", shepherdv1alpha1.Validation{Expression: "object.spec.trainer.numNode > 0"})); !strings.Contains(msg, "type-check failed") || !strings.Contains(msg, "numNode") {
		t.Errorf("a misspelled TrainJob field, second rule of the kind: %q, want a type-check error naming numNode", msg)
	}
	if got := kept(); got != 1 {
		t.Errorf("%d contexts kept after two TrainJob rules, want 1 (shared)", got)
	}
	if msg := compile(runtimeRule("runtime", "object.spec.trainer.numNodes > 0")); !strings.Contains(msg, "type-check failed") {
		t.Errorf("a TrainJob field read of a TrainingRuntime: %q, want a type-check error (the TrainJob's context is not the runtime's)", msg)
	}
	if msg := compile(runtimeRule("runtime-ok", "has(object.spec.template)")); msg != "" {
		t.Errorf("a well-typed TrainingRuntime rule: %q", msg)
	}
	if got := kept(); got != 2 {
		t.Errorf("%d contexts kept after rules of two kinds, want 2", got)
	}
	withVar := trainJobRule("var", shepherdv1alpha1.Validation{Expression: "variables.n > 0"}, shepherdv1alpha1.Variable{Name: "n", Expression: "object.spec.trainer.numNode"})
	if msg := compile(withVar); !strings.Contains(msg, "spec.variables[0].expression") {
		t.Errorf("a misspelled field in a variable: %q, want a type-check error at spec.variables[0].expression", msg)
	}
	wellTypedVar := trainJobRule("var-ok", shepherdv1alpha1.Validation{Expression: "variables.n > 0"}, shepherdv1alpha1.Variable{Name: "n", Expression: "object.spec.trainer.numNodes"})
	if msg := compile(wellTypedVar); msg != "" {
		t.Errorf("a well-typed rule with a variable, after TrainJob rules without: %s", msg)
	}
	if got := kept(); got != 2 {
		t.Errorf("%d contexts kept after rules with variables, want still 2 (not kept)", got)
	}
}

// A Schemas keeps at most maxTypeContexts contexts, however many distinct
// sets of resources its rules match; the rest are built for each rule.
func TestTypeContextsAreBounded(t *testing.T) {
	s := freshSchemas(t)
	tc := &validating.TypeChecker{SchemaResolver: s, RestMapper: s.RESTMapper()}
	vap := func(i int) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"trainer.kubeflow.org"}, APIVersions: []string{fmt.Sprintf("v%d", i)}, Resources: []string{"trainjobs"},
				}},
			}}},
		}}
	}
	first := s.typeContext(tc, vap(0))
	if again := s.typeContext(tc, vap(0)); again != first {
		t.Errorf("the same resources twice: two contexts, want the one kept")
	}
	for i := range 2 * maxTypeContexts {
		s.typeContext(tc, vap(i))
	}
	if got := len(s.typeContexts); got != maxTypeContexts {
		t.Errorf("%d contexts kept after %d distinct sets of resources, want %d", got, 2*maxTypeContexts, maxTypeContexts)
	}
	over := vap(3 * maxTypeContexts)
	if a, b := s.typeContext(tc, over), s.typeContext(tc, over); a == b {
		t.Errorf("past the bound, one set of resources twice got the same context: it was kept")
	}
}
