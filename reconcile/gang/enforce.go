package gang

import (
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// Gate is the "never enforce twice" decision of the three controllers
// (SPEC §9): every reconcile first shows it the object it read, and acts
// only if the gate says shepherd enforces gang termination.
//
// An object whose MinAvailableBreached is owned by another field manager
// (grove.BreachManager) shows that Grove runs and enforces gang termination
// itself; the gate reports it to the Enforcement once (Enforcement logs the
// decision once) and from then on, under setting auto, shepherd writes no
// MinAvailableBreached, readyReplicas, availableReplicas or wasAvailable,
// emits no GangTerminated event and deletes nothing. Under on it acts as if
// Grove were absent; under off it never acts. A nil Enforcement enforces.
//
// The only memory is "already reported"; what the gate decides comes from
// the objects and the Enforcement, so a restarted shepherd decides the same
// on its first reconcile.
type Gate struct {
	enf  *integrations.Enforcement
	once sync.Once
}

// NewGate wraps enf (nil: shepherd always enforces).
func NewGate(enf *integrations.Enforcement) *Gate { return &Gate{enf: enf} }

// Sign is what one object shows about who writes its MinAvailableBreached:
// the other field manager that owns it, "" when none.
func Sign(kind string, o metav1.Object, conds []metav1.Condition) (manager, reason string) {
	m, ok := grove.BreachManager(o.GetManagedFields(), conds, api.FieldManager)
	if !ok {
		return "", ""
	}
	return m, fmt.Sprintf("MinAvailableBreached of %s %s/%s is written by field manager %q", kind, o.GetNamespace(), o.GetName(), m)
}

// Observe records what o shows about who enforces gang termination.
func (g *Gate) Observe(kind string, o metav1.Object, conds []metav1.Condition) {
	if g == nil {
		return
	}
	if m, reason := Sign(kind, o, conds); m != "" {
		g.once.Do(func() { g.enf.SetUpstream(integrations.FeatureGangTermination, true, reason) })
	}
}

// Enforces reports whether shepherd enforces gang termination now.
func (g *Gate) Enforces() bool {
	return g == nil || g.enf.Enforces(integrations.FeatureGangTermination)
}

// Acts observes o and then reports whether shepherd enforces.
func (g *Gate) Acts(kind string, o metav1.Object, conds []metav1.Condition) bool {
	g.Observe(kind, o, conds)
	return g.Enforces()
}
