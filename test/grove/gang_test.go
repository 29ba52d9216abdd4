package grove

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// delay is the terminationDelay of the gang scenarios: short, real time.
var delay = 2 * time.Second

// barrierDelay outlasts every scenario's delay, so a barrier proves the
// scenario's delay has passed for shepherd.
const barrierDelay = 3 * time.Second

// Grove e2e: minAvailable = replicas; one pod of a standalone clique lost →
// the whole PodCliqueSet replica is terminated after the delay, the other
// replica is untouched — on Grove's schema and on the seed schema, with
// wasAvailable and the breach in the set's record and nothing written on
// the PodCliques (issue 30).
func TestGangStandaloneCliqueLosesPodTerminatesReplica(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		w.startShepherd()
		before := cluster.MetricOf(t, "shepherd_gang_terminations_total", "level", "pcs")
		w.createSet(setSpec{name: "inf", replicas: 2, delay: &delay, cliques: []cliqueSpec{
			{name: "leader", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}}})
		w.runAll("inf")
		for _, c := range w.cliques("inf") {
			if _, carrier := c.Annotations[api.AnnotationWasAvailable]; carrier || grove.WasAvailable(&c) || len(c.Status.Conditions) > 0 || slices.Contains(managers(&c), api.FieldManager) {
				t.Errorf("%s schema: shepherd wrote PodClique %s: carrier %v, field %v, conditions %+v, managers %v",
					w.p.name, c.Name, carrier, grove.WasAvailable(&c), c.Status.Conditions, managers(&c))
			}
		}
		if rec := w.record("inf"); rec.Status.GangTermination == nil || rec.Status.GangTermination.EnforcedBy != shepherdv1alpha1.EnforcerShepherd {
			t.Errorf("record's gangTermination = %+v, want enforced by shepherd", rec.Status.GangTermination)
		}

		w.losePod("inf-0-worker")
		w.waitRecord("inf", "inf-0-worker", "breached", breachedInRecord)
		w.waitGone("inf-0-worker", "inf-0-leader")
		w.mustExist("inf-1-worker", "inf-1-leader")

		ev := w.waitEvent(api.EventGangTerminated, "inf")
		if ev.Type != "Warning" || !strings.Contains(ev.Note, "replica 0") {
			t.Errorf("GangTerminated event = %s %q, want a Warning naming replica 0", ev.Type, ev.Note)
		}
		if after := cluster.MetricOf(t, "shepherd_gang_terminations_total", "level", "pcs"); after < before+1 {
			t.Errorf("shepherd_gang_terminations_total{level=pcs} = %v, want at least %v", after, before+1)
		}
	})
}

// Grove e2e: the same inside a PCSG whose minAvailable = replicas: the PCSG
// falls below minAvailable and the PodCliqueSet replica goes, standalone
// cliques included.
func TestGangPCSGCliqueLosesPodTerminatesReplica(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay,
		cliques: []cliqueSpec{{name: "router", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 2}}})
	w.runAll("inf")

	w.losePod("inf-0-sg-1-worker")
	w.waitGone("inf-0-sg-0-worker", "inf-0-sg-1-worker", "inf-0-router")
	w.waitEvent(api.EventGangTerminated, "inf")
}

// Grove e2e: 2 pods with minAvailable 1 — losing one does nothing, losing
// both terminates.
func TestGangMinAvailableOneOfTwo(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 1}}})
	w.runAll("inf")

	w.losePod("inf-0-worker")
	w.barrier(barrierDelay)
	w.mustExist("inf-0-worker")
	if r := w.cliqueRecord("inf", "inf-0-worker"); r.BreachedSince != nil {
		t.Errorf("one of two ready, minAvailable 1: breached since %v", r.BreachedSince)
	}

	w.losePod("inf-0-worker")
	w.waitGone("inf-0-worker")
}

// Grove e2e: one PCSG replica breached while the PCSG's minAvailable is still
// met → only that PCSG replica's PodCliques are deleted.
func TestGangOnePCSGReplicaBreached(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	before := cluster.MetricOf(t, "shepherd_gang_terminations_total", "level", "pcsg")
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay,
		cliques: []cliqueSpec{{name: "router", replicas: 1, minAvailable: 1}, {name: "prefill", replicas: 2, minAvailable: 2}, {name: "decode", replicas: 1, minAvailable: 1}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"prefill", "decode"}, replicas: 2, minAvailable: 1}}})
	w.runAll("inf")

	w.losePod("inf-0-sg-0-prefill")
	w.waitGone("inf-0-sg-0-prefill", "inf-0-sg-0-decode")
	w.barrier(barrierDelay)
	w.mustExist("inf-0-sg-1-prefill", "inf-0-sg-1-decode", "inf-0-router")
	w.waitEvent(api.EventGangTerminated, "inf-0-sg")
	if after := cluster.MetricOf(t, "shepherd_gang_terminations_total", "level", "pcsg"); after < before+1 {
		t.Errorf("shepherd_gang_terminations_total{level=pcsg} = %v, want at least %v", after, before+1)
	}
}

// Grove e2e: both PCSG replicas breached → below the PCSG's minAvailable →
// the PodCliqueSet replica is terminated.
func TestGangBothPCSGReplicasBreached(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	long := time.Hour
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &long,
		cliques: []cliqueSpec{{name: "router", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}},
		// The PCSG's own delay is short; until both replicas breach, the
		// PCSG is not below minAvailable and terminates nothing (its first
		// breach is still inside the delay when the second comes).
		groups: []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 1, delay: ptr.To(5 * time.Second)}}})
	w.runAll("inf")

	w.losePod("inf-0-sg-0-worker")
	w.losePod("inf-0-sg-1-worker")
	w.waitRecord("inf", "inf-0-sg-0-worker", "breached", breachedInRecord)
	w.waitRecord("inf", "inf-0-sg-1-worker", "breached", breachedInRecord)
	w.waitGone("inf-0-sg-0-worker", "inf-0-sg-1-worker", "inf-0-router")
	w.waitEvent(api.EventGangTerminated, "inf")
}

// A pod lost but minAvailable still met → nothing is deleted.
func TestGangPodLostMinAvailableMet(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "worker", replicas: 3, minAvailable: 2}}})
	w.runAll("inf")

	w.losePod("inf-0-worker")
	w.barrier(barrierDelay)
	w.mustExist("inf-0-worker")
	if r := w.cliqueRecord("inf", "inf-0-worker"); r.BreachedSince != nil {
		t.Errorf("two of three ready, minAvailable 2: breached since %v", r.BreachedSince)
	}
}

// A clique that never became available is never terminated.
func TestGangNeverAvailableNotTerminated(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 2}}})
	// Only one of two pods ever runs.
	p := w.pods("inf-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p, running)
	w.waitRecord("inf", "inf-0-worker", "recorded", func(shepherdv1alpha1.CliqueRecord) bool { return true })
	cluster.SetPodStatus(w.t, w.c, &p, notReady)
	w.barrier(barrierDelay)
	w.mustExist("inf-0-worker")
	if r := w.cliqueRecord("inf", "inf-0-worker"); r.WasAvailable || r.BreachedSince != nil {
		t.Errorf("never available: record says wasAvailable %v, breached since %v", r.WasAvailable, r.BreachedSince)
	}
}

// A rolling update in progress suspends breach detection, nothing deleted;
// when it ends, the breach is detected and acted on.
func TestGangRollingUpdate(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 2}}})
	w.runAll("inf")

	// Grove starts a rolling update.
	w.setRollingUpdate("inf-0-worker", false)
	w.losePod("inf-0-worker")
	w.barrier(barrierDelay)
	w.mustExist("inf-0-worker")
	if r := w.cliqueRecord("inf", "inf-0-worker"); r.BreachedSince != nil {
		t.Errorf("during a rolling update: breached since %v", r.BreachedSince)
	}

	// The update ends with the clique still short: now it is a breach.
	w.setRollingUpdate("inf-0-worker", true)
	w.waitGone("inf-0-worker")
}

// terminationDelay unset → the breach is recorded, nothing deleted.
func TestGangNoTerminationDelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 2}},
		groups: nil})
	w.runAll("inf")
	w.losePod("inf-0-worker")
	w.waitRecord("inf", "inf-0-worker", "breached", breachedInRecord)
	w.barrier(barrierDelay)
	w.mustExist("inf-0-worker")
}

// A PCSG override shorter than the PodCliqueSet delay is honoured: the PCSG
// replica goes after the override although the set's delay is an hour.
func TestGangPCSGOverrideShorter(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	long := time.Hour
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &long,
		cliques: []cliqueSpec{{name: "worker", replicas: 1, minAvailable: 1}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 1, delay: &delay}}})
	w.runAll("inf")
	w.losePod("inf-0-sg-1-worker")
	w.waitGone("inf-0-sg-1-worker")
	w.mustExist("inf-0-sg-0-worker")
}

// Stateless: shepherd stopped after the breach and started again once
// the delay has run out acts at once — the delay lives in the record's
// breachedSince, not in memory.
func TestGangShepherdRestartDuringDelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	first := w.startShepherd()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 2}}})
	w.runAll("inf")
	w.losePod("inf-0-worker")
	r := w.waitRecord("inf", "inf-0-worker", "breached", breachedInRecord)
	first.stop()

	since := r.BreachedSince.Time
	w.eventually("the delay to run out", func() (bool, error) { return time.Now().After(since.Add(delay + time.Second)), nil })
	w.mustExist("inf-0-worker")

	w.startShepherd()
	w.waitGone("inf-0-worker")
}

// groveSet is a set whose PodCliques the test, playing Grove, marks with
// Grove's own MinAvailableBreached before shepherd starts: a standalone
// router and a scaling group of workers, delay 2s.
func groveSet(w *world) {
	w.t.Helper()
	w.createSet(setSpec{name: "inf", replicas: 1, delay: &delay,
		cliques: []cliqueSpec{{name: "router", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 2, delay: &delay}}})
	for _, c := range w.cliques("inf") {
		w.groveBreach(c.Name, metav1.ConditionFalse, api.ReasonSufficientReadyPods, time.Now())
	}
}

// Never enforce twice (docs/concepts.md, "Lifecycle decisions"): where
// Grove writes MinAvailableBreached (a field manager other than shepherd's
// owns it), shepherd on setting auto
// stands down for that set — it writes nothing on the PodCliques and PCSGs,
// derives nothing (its record says Grove enforces), emits no GangTerminated
// event and deletes nothing, even for a breach long past its delay. The sign
// is read from managedFields on both schemas: Grove's atomic conditions list
// and the seed's list keyed by type.
func TestGangGroveEnforcesShepherdStandsDown(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		groveSet(w)
		s := w.startShepherd()
		w.eventually("shepherd to see Grove enforce gang termination", func() (bool, error) {
			return !s.enf.Enforces(integrations.FeatureGangTermination), nil
		})
		if got := s.enf.Status()[integrations.FeatureGangTermination]; !strings.Contains(got, groveManager) {
			t.Errorf("enforcement status %q does not say why (field manager %s)", got, groveManager)
		}
		w.runPods("inf")
		w.losePod("inf-0-router")
		w.losePod("inf-0-sg-1-worker")
		long := time.Now().Add(-time.Hour) // far past the 2s delay
		w.groveBreach("inf-0-router", metav1.ConditionTrue, api.ReasonInsufficientReadyPods, long)
		w.groveBreach("inf-0-sg-1-worker", metav1.ConditionTrue, api.ReasonInsufficientReadyPods, long)

		w.quiet("shepherd stands down", 3*delay, func() error {
			for _, c := range w.cliques("inf") {
				if c.DeletionTimestamp != nil {
					return fmt.Errorf("PodClique %s is being deleted", c.Name)
				}
				if _, ok := c.Annotations[api.AnnotationWasAvailable]; ok || grove.WasAvailable(&c) {
					return fmt.Errorf("PodClique %s got wasAvailable", c.Name)
				}
				if slices.Contains(managers(&c), api.FieldManager) {
					return fmt.Errorf("shepherd wrote PodClique %s (managers %v)", c.Name, managers(&c))
				}
				if cond := meta.FindStatusCondition(c.Status.Conditions, api.ConditionMinAvailableBreached); cond == nil || cond.Message != "written by the test playing Grove" {
					return fmt.Errorf("PodClique %s MinAvailableBreached = %+v, want Grove's", c.Name, cond)
				}
			}
			u := grove.NewObject(api.KindPodCliqueScalingGroup)
			if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "inf-0-sg"}, u); err != nil {
				return err
			}
			g, err := grove.GroupFrom(u)
			if err != nil {
				return err
			}
			if slices.Contains(managers(&g), api.FieldManager) || len(g.Status.Conditions) > 0 {
				return fmt.Errorf("shepherd wrote PodCliqueScalingGroup %s: managers %v, conditions %+v", g.Name, managers(&g), g.Status.Conditions)
			}
			if evs := w.events(api.EventGangTerminated); len(evs) > 0 {
				return fmt.Errorf("GangTerminated events: %+v", evs)
			}
			rec := w.record("inf")
			if rec == nil || rec.Status.GangTermination == nil || rec.Status.GangTermination.EnforcedBy != shepherdv1alpha1.EnforcerGrove || len(rec.Status.Cliques) > 0 {
				return fmt.Errorf("record %+v: want gang termination enforced by Grove and nothing derived", rec)
			}
			return nil
		})
		w.mustExist("inf-0-router", "inf-0-sg-0-worker", "inf-0-sg-1-worker")
	})
}

// The same with gang termination set on: shepherd enforces although Grove
// writes the condition — it reads the breach from the pods, keeps it in the
// record and, since Grove here never says the clique is breached (Grove
// would not terminate it), terminates the replica itself after the delay.
func TestGangGroveEnforcesShepherdOn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	groveSet(w)
	s := w.startShepherdWith(integrations.ModeOn)
	w.runAll("inf")
	if !s.enf.Enforces(integrations.FeatureGangTermination) {
		t.Fatal("setting on: shepherd must enforce")
	}
	w.losePod("inf-0-router")
	w.waitGone("inf-0-router", "inf-0-sg-0-worker", "inf-0-sg-1-worker")
	w.waitEvent(api.EventGangTerminated, "inf")
}
