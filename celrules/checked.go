package celrules

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// maxChecked bounds the compilations CheckPolicy keeps for SetPolicy: a
// policy checked at apply and never loaded (a dry run, a create another
// webhook then denied) is forgotten once this many newer ones were kept.
const maxChecked = 256

// checkedPolicies keeps what CheckPolicy compiled for the policy's load
// moments later (the webhook admits it, the controller then loads it), so
// that a policy is compiled once, not twice: compiling is most of a
// policy's cost, and 10,000 policies applied at once took twice as long
// when each was compiled at admission and again at load (test/faults).
type checkedPolicies struct {
	mu      sync.Mutex
	byName  map[string]*checkedPolicy
	arrived []string // names in the order they were kept, for eviction
}

type checkedPolicy struct {
	spec    shepherdv1alpha1.WorkloadPolicySpec
	schemas *Schemas
	cr      *compiledRule
	errs    field.ErrorList
}

// CheckPolicy compiles p against the current schemas as SetPolicy does
// and returns the errors, those SetPolicy would return and so those p's
// status would carry (admission of WorkloadPolicies). It changes no rule;
// the compilation is kept for SetPolicy of the same spec.
func (e *Engine) CheckPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	schemas := e.Schemas()
	cr, errs := compileRule(RuleFromPolicy(p), SourcePolicy, environment.NewExpressions, schemas)
	e.checked.put(p.Name, &checkedPolicy{spec: *p.Spec.DeepCopy(), schemas: schemas, cr: cr, errs: errs})
	return errs
}

func (c *checkedPolicies) put(name string, cp *checkedPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]*checkedPolicy{}
	}
	if _, ok := c.byName[name]; !ok {
		c.arrived = append(c.arrived, name)
	}
	c.byName[name] = cp
	for len(c.arrived) > maxChecked {
		delete(c.byName, c.arrived[0])
		c.arrived = c.arrived[1:]
	}
}

// take returns, and forgets, the compilation CheckPolicy kept for p when
// it was of the same spec against schemas; nil otherwise.
func (c *checkedPolicies) take(p *shepherdv1alpha1.WorkloadPolicy, schemas *Schemas) *checkedPolicy {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.byName[p.Name]
	if !ok {
		return nil
	}
	delete(c.byName, p.Name)
	for i, n := range c.arrived {
		if n == p.Name {
			c.arrived = append(c.arrived[:i], c.arrived[i+1:]...)
			break
		}
	}
	if cp.schemas != schemas || !equality.Semantic.DeepEqual(cp.spec, p.Spec) {
		return nil
	}
	return cp
}
