package updatefilter

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/celrules"
)

func TestWithCondition(t *testing.T) {
	theirs := admissionregistrationv1.MatchCondition{Name: "admins-own", Expression: "true"}
	ours := func(expr string) admissionregistrationv1.MatchCondition {
		return admissionregistrationv1.MatchCondition{Name: celrules.UpdateMatchConditionName, Expression: expr}
	}
	want := ours("request.operation != 'UPDATE' || object.?spec != oldObject.?spec")
	for _, tc := range []struct {
		name    string
		in      []admissionregistrationv1.MatchCondition
		want    *admissionregistrationv1.MatchCondition
		out     []admissionregistrationv1.MatchCondition
		changed bool
	}{
		{"added beside an admin's", []admissionregistrationv1.MatchCondition{theirs}, &want, []admissionregistrationv1.MatchCondition{theirs, want}, true},
		{"kept when equal", []admissionregistrationv1.MatchCondition{want, theirs}, &want, []admissionregistrationv1.MatchCondition{want, theirs}, false},
		{"replaced in place", []admissionregistrationv1.MatchCondition{ours("old"), theirs}, &want, []admissionregistrationv1.MatchCondition{want, theirs}, true},
		{"removed, the admin's kept", []admissionregistrationv1.MatchCondition{theirs, want}, nil, []admissionregistrationv1.MatchCondition{theirs}, true},
		{"nothing to remove", []admissionregistrationv1.MatchCondition{theirs}, nil, []admissionregistrationv1.MatchCondition{theirs}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conds := append([]admissionregistrationv1.MatchCondition{}, tc.in...)
			if got := withCondition(&conds, celrules.UpdateMatchConditionName, tc.want); got != tc.changed {
				t.Errorf("changed = %v, want %v", got, tc.changed)
			}
			if diff := cmp.Diff(tc.out, conds); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

// idleRules has work everywhere but on the requests it names.
type idleRules map[string]bool

func (idleRules) Version() uint64             { return 0 }
func (idleRules) UpdateReads() celrules.Reads { return celrules.Reads{} }
func (r idleRules) HasWork(mutating bool, gr schema.GroupResource, op string) bool {
	return !r[fmt.Sprintf("%v %s %s %s", mutating, gr.Group, gr.Resource, op)]
}

// The has-work condition keeps away exactly the requests without work
// among those a webhook's rules name, never a wildcard or subresource, and
// is absent when every request has work.
func TestWorkCondition(t *testing.T) {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs", "trainingruntimes", "trainjobs/status"}},
	}, {
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"grove.io"}, Resources: []string{"podcliques"}},
	}}
	cond, idle := workCondition(rules, false, idleRules{"false trainer.kubeflow.org trainjobs CREATE": true, "false trainer.kubeflow.org trainjobs/status CREATE": true})
	want := &admissionregistrationv1.MatchCondition{Name: WorkConditionName,
		Expression: "!((request.resource.group == 'trainer.kubeflow.org' && request.resource.resource == 'trainjobs' && request.operation == 'CREATE'))"}
	if diff := cmp.Diff(want, cond); diff != "" {
		t.Errorf("condition (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"CREATE trainjobs.trainer.kubeflow.org"}, idle); diff != "" {
		t.Errorf("idle (-want +got):\n%s", diff)
	}
	if cond, _ := workCondition(rules, true, idleRules{"false trainer.kubeflow.org trainjobs CREATE": true}); cond != nil {
		t.Errorf("the mutating webhook has work everywhere, yet got %+v", cond)
	}
}
