package grove

import (
	"encoding/json"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
)

// Who enforces gang termination (integrations.FeatureGangTermination).
//
// Grove writes a PodClique's and a PodCliqueScalingGroup's
// MinAvailableBreached itself (its podclique and podcliquescalinggroup
// reconcilestatus.go) and gang-terminates on terminationDelay. The sign
// that it runs is in the objects themselves: their MinAvailableBreached
// condition is owned, in metadata.managedFields, by a field manager that is
// not shepherd's (api.FieldManager; shepherd writes every status through
// it). Nothing else is needed — no Deployment lookup, no version guess — and
// the sign appears on the first object Grove reconciles.

// BreachManager returns the field manager, other than self, that owns the
// MinAvailableBreached condition of an object with these managedFields and
// conditions; ok is false when there is none (no such condition, or only
// self wrote it).
//
// Ownership takes two shapes. Where status.conditions is a map list keyed
// by type (the seed schema), managedFields names the entry:
// f:status/f:conditions/k:{"type":"MinAvailableBreached"}. Where it is an
// atomic list (Grove's schema: no list type), a manager owns the whole list
// (f:conditions: {}), so whoever last wrote the list wrote the
// MinAvailableBreached in it.
func BreachManager(managed []metav1.ManagedFieldsEntry, conds []metav1.Condition, self string) (manager string, ok bool) {
	if meta.FindStatusCondition(conds, api.ConditionMinAvailableBreached) == nil {
		return "", false
	}
	var found []string
	for _, e := range managed {
		if e.Manager == self || e.FieldsV1 == nil {
			continue
		}
		if ownsBreach(e.FieldsV1.Raw) {
			found = append(found, e.Manager)
		}
	}
	if len(found) == 0 {
		return "", false
	}
	slices.Sort(found) // a stable answer for logs
	return found[0], true
}

// ownsBreach reports whether a managedFields entry's fieldsV1 owns the
// MinAvailableBreached condition (see BreachManager).
func ownsBreach(raw []byte) bool {
	var set map[string]any
	if err := json.Unmarshal(raw, &set); err != nil {
		return false
	}
	status, _ := set["f:status"].(map[string]any)
	conds, ok := status["f:conditions"].(map[string]any)
	if !ok {
		return false
	}
	if len(conds) == 0 {
		return true // atomic list: the whole list is this manager's
	}
	for k := range conds {
		key, isKey := strings.CutPrefix(k, "k:")
		if !isKey {
			continue
		}
		var fields map[string]any
		if json.Unmarshal([]byte(key), &fields) == nil && fields["type"] == api.ConditionMinAvailableBreached {
			return true
		}
	}
	return false
}
