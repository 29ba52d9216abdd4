package jobset

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// Defaults are the JobSet defaulting rules, each defined once as the
// MutatingAdmissionPolicy it exports as (celrules says how they run).
var Defaults = []mapdefault.Rule{
	{ID: "D-JS-1", Description: "startupPolicy without order -> AnyOrder", Kind: jobSet, Build: func(mapdefault.Context) (mapdefault.Body, string) {
		// A startupPolicy without order means AnyOrder.
		return mapdefault.Body{
			MatchConditions: []admissionregistrationv1.MatchCondition{mapdefault.Cond("startup-order-unset",
				"object.?spec.?startupPolicy.hasValue() && !object.spec.startupPolicy.?startupPolicyOrder.hasValue()")},
			Patches: []string{"[JSONPatch{op: 'add', path: '/spec/startupPolicy/startupPolicyOrder', value: 'AnyOrder'}]"},
		}, ""
	}},
	{ID: "D-JS-2", Description: "startupPolicy InOrder without dependsOn -> the equivalent dependsOn chain, with a deprecation warning", Kind: jobSet, Warning: "spec.startupPolicy: startupPolicyOrder InOrder is deprecated and was rewritten to the equivalent replicatedJobs[].dependsOn chain (each replicatedJob waits for the previous one to be Ready)", Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// startupPolicy InOrder without dependsOn -> the equivalent
		// dependsOn chain. On UPDATE also when the dependsOn already are
		// that chain (a client re-sent startupPolicy after the rewrite), and
		// never for a stored object that still has a startupPolicy: the
		// rewrite would change immutable fields.
		if c.DisableStartupPolicyRewrite {
			return mapdefault.Body{}, "the rewrite is switched off (--disable-startup-policy-rewrite): D-JS-2 does nothing then, and V-JS-5 warns of InOrder"
		}
		return mapdefault.Body{
			MatchConditions: []admissionregistrationv1.MatchCondition{mapdefault.Cond("in-order",
				"object.?spec.?startupPolicy.?startupPolicyOrder.orValue('') == 'InOrder'")},
			// The replicatedJobs are read from object in each expression
			// (not through a variable, which the type checker only knows as
			// dyn) so that their fields are type-checked.
			Variables: []admissionregistrationv1.Variable{
				{Name: "noDependsOn", Expression: "object.spec.?replicatedJobs.orValue([]).all(rj, size(rj.?dependsOn.orValue([])) == 0)"},
				{Name: "isChain", Expression: `object.spec.?replicatedJobs.orValue([]).all(i, rj, i == 0 ?
  size(rj.?dependsOn.orValue([])) == 0 :
  size(rj.?dependsOn.orValue([])) == 1 && rj.dependsOn[0].name == object.spec.replicatedJobs[i - 1].name && rj.dependsOn[0].status == 'Ready')`},
				{Name: "rewrite", Expression: `(variables.noDependsOn || (request.operation == 'UPDATE' && variables.isChain)) &&
  (request.operation != 'UPDATE' || !oldObject.?spec.?startupPolicy.hasValue())`},
			},
			// string(): the apiserver compiles with an untyped object, and
			// a map literal's values must have one type.
			Patches: []string{`variables.rewrite ?
  object.spec.?replicatedJobs.orValue([]).transformList(i, rj, i > 0,
    JSONPatch{op: 'add', path: '/spec/replicatedJobs/' + string(i) + '/dependsOn', value: [{'name': string(object.spec.replicatedJobs[i - 1].name), 'status': 'Ready'}]}) +
  [JSONPatch{op: 'remove', path: '/spec/startupPolicy'}] :
  []`},
		}, ""
	}},
}

var jobSet = schema.GroupKind{Group: api.JobSetGroup, Kind: api.KindJobSet}
