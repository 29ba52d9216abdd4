package celrules

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// TestUpdateCondition: a rule's UPDATE condition compares exactly the parts
// of the object the rule reads, and there is none when any UPDATE may
// change its verdict (it reads the request's user, the authorizer or the
// whole object) or when it reads nothing of the object.
func TestUpdateCondition(t *testing.T) {
	for _, tc := range []struct {
		name        string
		expressions []string
		want        string // "" = no condition
	}{
		{"spec", []string{"object.spec.trainer.numNodes <= 8"},
			"request.operation != 'UPDATE' || object.?spec != oldObject.?spec"},
		{"labels and spec", []string{"has(object.metadata.labels.team)", "object.spec.runtimeRef.name != ''"},
			"request.operation != 'UPDATE' || object.metadata.?labels != oldObject.metadata.?labels || object.?spec != oldObject.?spec"},
		{"transition", []string{"oldObject == null || object.spec.suspend == oldObject.spec.suspend"},
			"request.operation != 'UPDATE' || object.?spec != oldObject.?spec"},
		{"the user", []string{"request.userInfo.username != 'x' && object.spec.suspend"}, ""},
		{"the authorizer", []string{"authorizer.group('').resource('pods').check('get').allowed()"}, ""},
		{"the whole object", []string{"object != null"}, ""},
		{"nothing of the object", []string{"request.operation == 'CREATE'"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Rule{}
			for _, e := range tc.expressions {
				r.Validations = append(r.Validations, shepherdv1alpha1.Validation{Expression: e})
			}
			c, ok := readsOfRule(&r).updateCondition()
			if got := c.Expression; got != tc.want || ok != (tc.want != "") {
				t.Errorf("updateCondition = %q, %v; want %q", got, ok, tc.want)
			}
			if ok && c.Name != UpdateConditionName {
				t.Errorf("named %q, want %q", c.Name, UpdateConditionName)
			}
		})
	}
}

// TestRuleIsJudgedOnUpdateOnlyWhenWhatItReadsChanges: a stored TrainJob
// that breaks a policy (applied after it was created) may still have its
// finalizers and status changed; a change to the spec the policy reads is
// judged, and so is a CREATE. The exported policy carries the condition
// the engine evaluates.
func TestRuleIsJudgedOnUpdateOnlyWhenWhatItReadsChanges(t *testing.T) {
	e := policyEngine(t, policy("max-nodes", nil, "!has(object.spec.trainer) || object.spec.trainer.numNodes <= 8"))
	spec := func(nodes int64) map[string]any {
		return map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"numNodes": nodes}}
	}
	stored := trainJob(nil, spec(16))
	withFinalizer := runtime.DeepCopyJSON(stored)
	withFinalizer["metadata"].(map[string]any)["finalizers"] = []any{"example.com/cleanup"}
	withStatus := runtime.DeepCopyJSON(stored)
	withStatus["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}
	for _, tc := range []struct {
		name string
		in   *Input
		want []string
	}{
		{"create", trainJobInput("CREATE", stored, nil), []string{"max-nodes/Deny"}},
		{"finalizer added", trainJobInput("UPDATE", withFinalizer, stored), nil},
		{"finalizer removed", trainJobInput("UPDATE", stored, withFinalizer), nil},
		{"status written", trainJobInput("UPDATE", withStatus, stored), nil},
		{"spec changed, still breaking", trainJobInput("UPDATE", trainJob(nil, spec(12)), stored), []string{"max-nodes/Deny"}},
		{"spec fixed", trainJobInput("UPDATE", trainJob(nil, spec(4)), stored), nil},
		{"broken by the update", trainJobInput("UPDATE", trainJob(nil, spec(9)), trainJob(nil, spec(4))), []string{"max-nodes/Deny"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, rules(e.Evaluate(context.Background(), tc.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	vaps, _ := e.Export()
	var conds []string
	for _, v := range vaps {
		for _, mc := range v.Spec.MatchConditions {
			conds = append(conds, mc.Name+": "+mc.Expression)
		}
	}
	want := []string{UpdateConditionName + ": request.operation != 'UPDATE' || object.?spec != oldObject.?spec"}
	if diff := cmp.Diff(want, conds); diff != "" {
		t.Errorf("the exported policy's matchConditions (-want +got):\n%s", diff)
	}
}

// TestUpdateConditionNameIsReserved: a policy cannot name a condition of
// its own like the one shepherd adds, nor have more than a
// ValidatingAdmissionPolicy can hold beside it.
func TestUpdateConditionNameIsReserved(t *testing.T) {
	e := policyEngine(t)
	reserved := policy("reserved", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: UpdateConditionName, Expression: "true"}}
	}, "object.spec.suspend != true")
	errs := e.SetPolicy(reserved)
	if len(errs) != 1 || errs[0].Field != "spec.matchConditions[0].name" {
		t.Errorf("SetPolicy(a condition named %s) = %v, want one error on spec.matchConditions[0].name", UpdateConditionName, errs)
	}
	tooMany := policy("too-many", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		for i := range maxMatchConditions {
			s.MatchConditions = append(s.MatchConditions, shepherdv1alpha1.MatchCondition{Name: fmt.Sprintf("c%d", i), Expression: "true"})
		}
	}, "object.spec.suspend != true")
	errs = e.SetPolicy(tooMany)
	if len(errs) != 1 || errs[0].Field != "spec.matchConditions" {
		t.Errorf("SetPolicy(%d conditions) = %v, want one error on spec.matchConditions", maxMatchConditions, errs)
	}
}

// TestRulesSayWhatAnUpdateMustChange: the rule list (export rules) names,
// per rule, the parts of the object an UPDATE must change to be judged.
func TestRulesSayWhatAnUpdateMustChange(t *testing.T) {
	e := policyEngine(t,
		policy("labels-and-spec", nil, "has(object.metadata.labels.team) && object.spec.suspend != true"),
		policy("by-user", nil, "request.userInfo.username != 'intruder'"))
	got := map[string]string{}
	for _, r := range e.Rules() {
		if r.Source == SourcePolicy {
			got[r.ID] = r.OnUpdate
		}
	}
	want := map[string]string{"labels-and-spec": "metadata.labels, spec", "by-user": OnUpdateAlways}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OnUpdate (-want +got):\n%s", diff)
	}
}
