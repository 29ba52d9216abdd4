package updatefilter

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

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
			if got := withCondition(&conds, tc.want); got != tc.changed {
				t.Errorf("changed = %v, want %v", got, tc.changed)
			}
			if diff := cmp.Diff(tc.out, conds); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}
