package gang

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// Who enforces, per PodCliqueSet. shepherd writes no condition on a
// PodClique or scaling group (Grove rewrites both), so a MinAvailableBreached
// on them is Grove's: the condition owned, in managedFields, by a field
// manager other than shepherd's (grove.BreachManager; an earlier shepherd
// wrote its own as api.FieldManager, which never counts). The decision is
// the set's own — not the cluster's after the first object seen — and comes
// from the objects alone, so a restarted shepherd decides the same.

// Sign is what one object shows about who writes its MinAvailableBreached:
// the other field manager that owns it, "" when none, and why in words.
func Sign(kind string, o metav1.Object, conds []metav1.Condition) (manager, reason string) {
	m, ok := grove.BreachManager(o.GetManagedFields(), conds, api.FieldManager)
	if !ok {
		return "", ""
	}
	return m, fmt.Sprintf("MinAvailableBreached of %s %s/%s is written by field manager %q", kind, o.GetNamespace(), o.GetName(), m)
}

// GroveSign is Sign over a set's PodCliques and scaling groups: the first
// one Grove writes, "" when none.
func GroveSign(cliques []grove.Clique, groups []grove.ScalingGroup) (manager, reason string) {
	for i := range cliques {
		if m, why := Sign(api.KindPodClique, &cliques[i], cliques[i].Status.Conditions); m != "" {
			return m, why
		}
	}
	for i := range groups {
		if m, why := Sign(api.KindPodCliqueScalingGroup, &groups[i], groups[i].Status.Conditions); m != "" {
			return m, why
		}
	}
	return "", ""
}

// GroveBreachedSince returns when Grove's MinAvailableBreached on c became
// True, and whether Grove says c is breached now: the start of the delay
// after which Grove terminates c's gang itself.
func GroveBreachedSince(c *grove.Clique) (time.Time, bool) {
	if _, upstream := grove.BreachManager(c.ManagedFields, c.Status.Conditions, api.FieldManager); !upstream {
		return time.Time{}, false
	}
	return breachedSince(c.Status.Conditions)
}

// legacyBreach returns the start of a breach an earlier shepherd kept in
// c's own MinAvailableBreached (a condition no other manager owns), read
// once on upgrade when the set's record has no entry for c.
func legacyBreach(c *grove.Clique) (metav1.Time, bool) {
	if _, upstream := grove.BreachManager(c.ManagedFields, c.Status.Conditions, api.FieldManager); upstream {
		return metav1.Time{}, false
	}
	t, ok := breachedSince(c.Status.Conditions)
	return metav1.NewTime(t), ok
}

func breachedSince(conds []metav1.Condition) (time.Time, bool) {
	cond := meta.FindStatusCondition(conds, api.ConditionMinAvailableBreached)
	if cond == nil || cond.Status != metav1.ConditionTrue {
		return time.Time{}, false
	}
	return cond.LastTransitionTime.Time, true
}
