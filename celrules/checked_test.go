package celrules

import (
	"fmt"
	"testing"
)

// A policy checked at admission is loaded with what the check compiled,
// not compiled again; a policy whose spec changed in between, or that was
// never checked, is compiled at load; and the checks kept are bounded.
func TestCheckedPolicyIsLoadedWithoutCompilingAgain(t *testing.T) {
	e := policyEngine(t)
	p := policy("max-nodes", nil, "object.spec.?trainer.?numNodes.orValue(1) <= 8")
	if errs := e.CheckPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	checked := e.checked.byName[p.Name].cr
	if errs := e.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	if e.policies[p.Name] != checked {
		t.Error("SetPolicy compiled a policy CheckPolicy had just compiled")
	}
	if _, kept := e.checked.byName[p.Name]; kept {
		t.Error("the check is kept after the load took it")
	}

	// Changed between the check and the load: compiled again, as loaded.
	q := policy("team", nil, "object.spec.?trainer.?numNodes.orValue(1) <= 8")
	e.CheckPolicy(q)
	stale := e.checked.byName[q.Name].cr
	q.Spec.Validations[0].Expression = "object.spec.?trainer.?numNodes.orValue(1) <= 4"
	q.ResourceVersion = "2"
	if errs := e.SetPolicy(q); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := e.policies[q.Name]; got == stale || got.rule.Validations[0].Expression != q.Spec.Validations[0].Expression {
		t.Error("SetPolicy loaded the compilation of a spec that has changed since")
	}

	for i := range maxChecked + 10 {
		e.CheckPolicy(policy(fmt.Sprintf("p-%d", i), nil, "true"))
	}
	if n, a := len(e.checked.byName), len(e.checked.arrived); n != maxChecked || a != maxChecked {
		t.Errorf("%d checks kept (%d in order), want at most %d", n, a, maxChecked)
	}
	if _, ok := e.checked.byName["p-0"]; ok {
		t.Error("the oldest check was kept over newer ones")
	}
}
