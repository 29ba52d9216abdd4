package grove

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
)

func TestBreachManager(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	const (
		atomic  = `{"f:status":{".":{},"f:conditions":{},"f:readyReplicas":{}}}`
		keyed   = `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"MinAvailableBreached\"}":{".":{},"f:status":{}}}}}`
		other   = `{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"PodCliqueScheduled\"}":{".":{},"f:status":{}}}}}`
		noConds = `{"f:status":{"f:readyReplicas":{}}}`
	)
	breach := []metav1.Condition{{Type: api.ConditionMinAvailableBreached, Status: metav1.ConditionTrue}}
	type out struct {
		Manager string
		OK      bool
	}
	tests := []struct {
		name    string
		managed []metav1.ManagedFieldsEntry
		conds   []metav1.Condition
		want    out
	}{
		{name: "no managedFields", conds: breach},
		{name: "only shepherd", conds: breach, managed: []metav1.ManagedFieldsEntry{entry(api.FieldManager, atomic)}},
		{name: "Grove owns the atomic list", conds: breach, managed: []metav1.ManagedFieldsEntry{entry(api.FieldManager, noConds), entry("grove-operator", atomic)},
			want: out{"grove-operator", true}},
		{name: "Grove owns the keyed entry", conds: breach, managed: []metav1.ManagedFieldsEntry{entry("grove-operator", keyed)},
			want: out{"grove-operator", true}},
		{name: "another manager owns another keyed entry", conds: breach, managed: []metav1.ManagedFieldsEntry{entry("grove-operator", other), entry(api.FieldManager, keyed)}},
		{name: "a manager without conditions", conds: breach, managed: []metav1.ManagedFieldsEntry{entry("kubectl", noConds)}},
		{name: "no MinAvailableBreached in the list", conds: []metav1.Condition{{Type: "PodCliqueScheduled"}},
			managed: []metav1.ManagedFieldsEntry{entry("grove-operator", atomic)}},
		{name: "unparsable fieldsV1 is no sign", conds: breach, managed: []metav1.ManagedFieldsEntry{entry("grove-operator", `{`)}},
		{name: "two others: a stable answer", conds: breach, managed: []metav1.ManagedFieldsEntry{entry("zz", keyed), entry("grove-operator", keyed)},
			want: out{"grove-operator", true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := BreachManager(tc.managed, tc.conds, api.FieldManager)
			if diff := cmp.Diff(tc.want, out{m, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
