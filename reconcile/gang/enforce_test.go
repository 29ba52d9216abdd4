package gang

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
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

// The "never enforce twice" decision: which objects show that Grove writes
// MinAvailableBreached, and what shepherd does under each setting.
func TestGate(t *testing.T) {
	breach := []metav1.Condition{{Type: api.ConditionMinAvailableBreached, Status: metav1.ConditionTrue, Reason: api.ReasonInsufficientReadyPods}}
	tests := []struct {
		name    string
		setting integrations.Mode
		managed []metav1.ManagedFieldsEntry
		conds   []metav1.Condition

		wantActs   bool
		wantStatus string
	}{
		{name: "auto, nobody but shepherd", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed(api.FieldManager, atomicConds)}, wantActs: true, wantStatus: "shepherd"},
		{name: "auto, Grove owns the atomic conditions list", setting: integrations.ModeAuto, conds: breach,
			managed:  []metav1.ManagedFieldsEntry{managed(api.FieldManager, `{"f:metadata":{"f:annotations":{}}}`), managed("grove-operator", atomicConds)},
			wantActs: false, wantStatus: `upstream (MinAvailableBreached of PodClique ns/c is written by field manager "grove-operator")`},
		{name: "auto, Grove owns the map-list entry", setting: integrations.ModeAuto, conds: breach,
			managed:  []metav1.ManagedFieldsEntry{managed("grove-operator", mapConds)},
			wantActs: false, wantStatus: `upstream (MinAvailableBreached of PodClique ns/c is written by field manager "grove-operator")`},
		{name: "auto, another manager owns only another condition", setting: integrations.ModeAuto, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", otherCond), managed(api.FieldManager, mapConds)}, wantActs: true, wantStatus: "shepherd"},
		{name: "auto, a list without MinAvailableBreached proves nothing", setting: integrations.ModeAuto,
			conds:   []metav1.Condition{{Type: "PodCliqueScheduled", Status: metav1.ConditionTrue}},
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}, wantActs: true, wantStatus: "shepherd"},
		{name: "on: shepherd acts although Grove writes it", setting: integrations.ModeOn, conds: breach,
			managed: []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}, wantActs: true, wantStatus: "shepherd"},
		{name: "off: never", setting: integrations.ModeOff, conds: breach, wantActs: false, wantStatus: "off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enf := integrations.NewEnforcement(logr.Discard(), map[integrations.Feature]integrations.Mode{integrations.FeatureGangTermination: tc.setting})
			g := NewGate(enf)
			c := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ManagedFields: tc.managed}}
			if got := g.Acts(api.KindPodClique, c, tc.conds); got != tc.wantActs {
				t.Errorf("Acts = %v, want %v", got, tc.wantActs)
			}
			if diff := cmp.Diff(tc.wantStatus, enf.Status()[integrations.FeatureGangTermination]); diff != "" {
				t.Errorf("enforcement status (-want +got):\n%s", diff)
			}
			// Once seen, every object is Grove's under auto: the
			// Enforcement is per cluster, not per object.
			plain := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d"}}
			if got := g.Acts(api.KindPodClique, plain, nil); got != tc.wantActs {
				t.Errorf("Acts on an object without a sign = %v, want %v", got, tc.wantActs)
			}
		})
	}
}

func TestNilGateActs(t *testing.T) {
	var g *Gate
	if !g.Acts(api.KindPodClique, &grovev1alpha1.PodClique{}, nil) {
		t.Error("a nil gate (no Enforcement) must enforce")
	}
	if !NewGate(nil).Acts(api.KindPodClique, &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}}},
		[]metav1.Condition{{Type: api.ConditionMinAvailableBreached}}) {
		t.Error("a nil Enforcement enforces")
	}
}
