package celrules

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// Rules without variables that compile the same expressions share the
// compiled conditions (one program each, not one per rule); a rule with
// variables compiles its own; once no rule holds a shared condition it is
// collected and its entry removed, so the memory of deleted policies
// returns.
func TestRulesShareTheConditionsTheyCompileAlike(t *testing.T) {
	const expr = "object.spec.trainer.numNodes <= 64"
	compile := func(name string, mutate func(*shepherdv1alpha1.WorkloadPolicySpec)) *compiledRule {
		t.Helper()
		p := policy(name, mutate, expr)
		p.Spec.Validations[0].Message = "at most 64 nodes" // the same for every rule
		cr, errs := compileRule(RuleFromPolicy(p), SourcePolicy, environment.NewExpressions, seedSchemas(t))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return cr
	}
	before := map[string]bool{}
	sharedConditions.Range(func(k, _ any) bool { before[k.(string)] = true; return true })
	a, b := compile("a", nil), compile("b", nil)
	if len(a.shared) == 0 || len(a.shared) != len(b.shared) {
		t.Fatalf("rules a and b share %d and %d conditions, want the same number, more than 0", len(a.shared), len(b.shared))
	}
	for i := range a.shared {
		if a.shared[i] != b.shared[i] {
			t.Errorf("condition %d compiled twice for two rules with the same expressions", i)
		}
	}
	withVars := compile("c", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Variables = []shepherdv1alpha1.Variable{{Name: "n", Expression: "object.spec.trainer.numNodes"}}
	})
	if len(withVars.shared) != 0 {
		t.Errorf("a rule with variables shares %d conditions: its compiler holds its variables", len(withVars.shared))
	}

	// The conditions only a and b use (others, such as an UPDATE
	// condition of the built-ins, stay held by the engines of other tests).
	var keys []string
	for _, sc := range a.shared {
		if !before[sc.key] {
			keys = append(keys, sc.key)
		}
	}
	if len(keys) == 0 {
		t.Fatal("rules a and b compiled no condition of their own: the test would check nothing")
	}
	a, b = nil, nil
	if err := testkit.Poll(10*time.Millisecond, 5*time.Second, func() (bool, string) {
		runtime.GC()
		left := 0
		for _, k := range keys {
			if _, ok := sharedConditions.Load(k); ok {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d of %d still held", left, len(keys))
	}); err != nil {
		t.Fatalf("shared conditions held after their rules were dropped: %v", err)
	}
	runtime.KeepAlive(withVars)
}
