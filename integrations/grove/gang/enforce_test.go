package gang

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// managed is a managedFields entry of manager owning fieldsV1.
func managed(manager, fieldsV1 string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fieldsV1)}}
}

const (
	atomicConds = `{"f:status":{"f:conditions":{},"f:readyReplicas":{}}}`
	mapConds    = `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"MinAvailableBreached\"}":{".":{},"f:status":{},"f:type":{}}}}}`
	otherCond   = `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"Succeeded\"}":{".":{},"f:status":{}}}}}`
)

// The "never enforce twice" decision, per PodCliqueSet: which objects show
// that Grove writes MinAvailableBreached, and who enforces under each
// setting. A set without the sign is shepherd's under auto even after
// another set showed it (issue 30: the decision was the cluster's, latched
// by the first PodClique seen).
func TestWhoEnforcesPerSet(t *testing.T) {
	breach := []metav1.Condition{{Type: api.ConditionMinAvailableBreached, Status: metav1.ConditionTrue, Reason: api.ReasonInsufficientReadyPods}}
	upstream := shepherdv1alpha1.EnforcerGrove
	me := shepherdv1alpha1.EnforcerShepherd
	tests := []struct {
		name    string
		setting integrations.Mode
		managed []metav1.ManagedFieldsEntry
		conds   []metav1.Condition
		want    shepherdv1alpha1.Enforcer
	}{
		{name: "auto, only an earlier shepherd wrote it", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed(api.FieldManager, atomicConds)}, want: me},
		{name: "auto, Grove owns the atomic conditions list", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed(api.FieldManager, `{"f:metadata":{"f:annotations":{}}}`), managed("grove-operator", atomicConds)}, want: upstream},
		{name: "auto, Grove owns the map-list entry", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", mapConds)}, want: upstream},
		{name: "auto, another manager owns only another condition", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", otherCond), managed(api.FieldManager, mapConds)}, want: me},
		{name: "auto, a list without MinAvailableBreached proves nothing", setting: integrations.ModeAuto,
			conds:   []metav1.Condition{{Type: "PodCliqueScheduled", Status: metav1.ConditionTrue}},
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}, want: me},
		{name: "on: shepherd although Grove writes it", setting: integrations.ModeOn, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}, want: me},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clique("c", 0, "", 0, tc.conds...)
			c.Namespace, c.ManagedFields = "ns", tc.managed
			d := Decide(SetInput{Set: grove.SetOf(setWithDelay(nil)), Cliques: grove.CliquesOf(c), Mode: tc.setting}, t0)
			if d.Write != WriteRecord || d.Status.GangTermination == nil {
				t.Fatalf("decision %+v: want the record written with who enforces", d)
			}
			if got := d.Status.GangTermination.EnforcedBy; got != tc.want {
				t.Errorf("enforcedBy = %s, want %s (%s)", got, tc.want, d.Status.GangTermination.Message)
			}
			if tc.want == upstream && (len(d.Status.Cliques) != 0 || !strings.Contains(d.Status.GangTermination.Message, `"grove-operator"`)) {
				t.Errorf("standing down, shepherd derived %+v, message %q; want nothing, naming Grove's field manager", d.Status.Cliques, d.Status.GangTermination.Message)
			}
			// Another set, without the sign, is shepherd's whatever this one shows.
			other := Decide(SetInput{Set: grove.SetOf(setWithDelay(nil)), Cliques: grove.CliquesOf(clique("d", 0, "", 0)), Mode: tc.setting}, t0)
			if got := other.Status.GangTermination.EnforcedBy; got != me {
				t.Errorf("a set without Grove's sign: enforcedBy = %s, want shepherd", got)
			}
		})
	}
}
