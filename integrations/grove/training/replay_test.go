package training

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// world is the API as the Training set controller sees it, in memory:
// Decide's one write per reconcile is applied to it the way the apiserver
// applies the controller's requests — the record created once, then
// replaced under an optimistic lock (the resourceVersion the decision
// read), deletes with UID preconditions.
type world struct {
	t       *testing.T
	clk     clock.PassiveClock
	pcs     *grove.Set
	cliques []grove.Clique
	pods    []corev1.Pod
	// state is the set's record, once recorded; recRV its resourceVersion.
	state    State
	recorded bool
	recRV    string
	rv       int
}

func newWorld(t *testing.T, pcs *grove.Set, cliques []grove.Clique, pods []corev1.Pod) *world {
	// The world's own copies, read again from copies of the served objects.
	set, err := grove.SetFrom(pcs.Served.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clk: clockAt(t0), pcs: set, pods: slices.Clone(pods)}
	for _, c := range cliques {
		cc, err := grove.CliqueFrom(c.Served.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		w.cliques = append(w.cliques, cc)
	}
	return w
}

func clockAt(t time.Time) clock.PassiveClock { return clocktesting.NewFakePassiveClock(t) }

// clone is a snapshot of w (what a cache may still show).
func (w *world) clone() *world {
	out := newWorld(w.t, w.pcs, w.cliques, w.pods)
	out.clk, out.rv, out.recorded, out.recRV, out.state = w.clk, w.rv, w.recorded, w.recRV, w.state.clone()
	return out
}

// input is what the controller reads: the record, or before there is one
// the objects' own state (Upgrade).
func (w *world) input() Input {
	in := input(w.t, w.pcs, slices.Clone(w.cliques), slices.Clone(w.pods))
	if w.recorded {
		in.State, in.Unrecorded = w.state.clone(), false
	} else {
		in.Unrecorded = true
	}
	return in
}

// readRV is the record version a decision on w reads: "" for none (its
// write is a create).
func (w *world) readRV() string {
	if !w.recorded {
		return ""
	}
	return w.recRV
}

func (w *world) bump() string { w.rv++; return strconv.Itoa(w.rv) }

// apply makes d's write, decided on a read of the record at readRV. It
// reports whether the write landed.
func (w *world) apply(d Decision, readRV string) bool {
	switch d.Write {
	case WriteStatus, WriteMarker, WriteCliques:
		if readRV == "" && w.recorded || readRV != "" && readRV != w.recRV {
			return false // AlreadyExists, or Conflict
		}
		w.state, w.recorded, w.recRV = d.State.clone(), true, w.bump()
	case WriteScale:
		for _, ref := range d.Scale {
			if i := slices.IndexFunc(w.cliques, func(c grove.Clique) bool { return c.Name == ref.Name && c.UID == ref.UID }); i >= 0 {
				w.cliques[i].Spec.Replicas = 0
				if err := unstructured.SetNestedField(w.cliques[i].Served.Object, int64(0), "spec", "replicas"); err != nil {
					w.t.Fatal(err)
				}
			}
		}
	case WriteDelete:
		for _, ref := range d.Delete {
			i := slices.IndexFunc(w.pods, func(p corev1.Pod) bool { return p.Name == ref.Name && p.UID == ref.UID })
			if i < 0 {
				continue // gone, or another pod of that name: the UID precondition
			}
			if len(w.pods[i].Finalizers) > 0 {
				w.pods[i].DeletionTimestamp = &metav1.Time{Time: w.clk.Now()}
				continue
			}
			w.pods = slices.Delete(w.pods, i, i+1)
		}
	}
	return true
}

// step is one reconcile: read, decide, write; the events and metrics of a
// status write only once it landed.
type step struct {
	d      Decision
	landed bool
}

// trace is what a run did.
type trace []step

// run reconciles until a reconcile writes nothing (at most 30 times).
func (w *world) run() trace {
	var tr trace
	for range 30 {
		rv := w.readRV()
		d := Decide(w.clk, w.input())
		if d.Write == WriteNone {
			return append(tr, step{d: d})
		}
		tr = append(tr, step{d: d, landed: w.apply(d, rv)})
	}
	w.t.Fatalf("no quiescence after 30 reconciles: %s", tr)
	return tr
}

func (tr trace) String() string {
	var s string
	for _, st := range tr {
		s += fmt.Sprintf("\n  %s landed=%v events=%v", st.d.Write, st.landed, reasons(st.d.Events))
	}
	return s
}

// outcome summarises a run: the final status, and every write and event.
func (w *world) outcome(tr trace) outcome {
	st := w.input().State
	o := outcome{Phase: st.Phase, Count: st.RestartCount}
	if st.StartTime != nil {
		o.Start = ptr.To(st.StartTime.UTC())
	}
	var deletes []PodRef
	for _, s := range tr {
		if !s.landed {
			continue
		}
		d := s.d
		switch d.Write {
		case WriteStatus:
			if d.Failure != "" {
				o.Failure = d.Failure
			}
			o.Restarted += d.Restarts
			for _, e := range d.Events {
				r := e.Reason
				if e.Clique != "" {
					r += "/" + e.Clique
				}
				o.Events = append(o.Events, r)
			}
		case WriteMarker:
			if d.Mark.Marker.Done {
				o.Finishes = append(o.Finishes, markString(d.Mark))
			} else {
				o.Marks = append(o.Marks, markString(d.Mark))
			}
		case WriteDelete:
			deletes = append(deletes, d.Delete...)
		}
	}
	o.Deletes = podNames(deletes)
	o.Requeue = tr[len(tr)-1].d.RequeueAfter
	return o
}

func markString(m Mark) string {
	s := fmt.Sprintf("%s:%d:%v", m.Clique, m.Marker.Restart, m.Marker.Pods)
	if m.Marker.Failed {
		s += ":failed"
	}
	if m.Marker.Done {
		s += ":done"
	}
	return s
}

// runOutcome runs a set to quiescence from the objects given.
func runOutcome(t *testing.T, pcs *grove.Set, cliques []grove.Clique, pods []corev1.Pod) outcome {
	t.Helper()
	w := newWorld(t, pcs, cliques, pods)
	return w.outcome(w.run())
}

// crashScenario is a replica 0 whose two PodCliques must both be marked,
// with a failed pod, budget maxRestarts; replica 1 healthy. carriers: the
// set's Training status is where an earlier shepherd kept it on Grove's
// schema, the annotations (else the seed's status fields); either is
// carried into the record by its first write.
func crashScenario(t *testing.T, maxRestarts int32, carriers bool) *world {
	pcs := set(maxRestarts, nil, nil)
	pcs.Spec.Template.Cliques = append(pcs.Spec.Template.Cliques, &grovev1alpha1.PodCliqueTemplateSpec{Name: "v", Spec: grovev1alpha1.PodCliqueSpec{Replicas: 1}})
	v := mkClique(0, cliqueState{wasAvail: true}, func(c *grovev1alpha1.PodClique) { c.Name, c.UID, c.Spec.Replicas = "pcs-0-v", "cv", 1 })
	vp := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pcs-0-v-0", UID: "pv", OwnerReferences: controller(api.KindPodClique, "pcs-0-v", "cv")}}
	vp.Status.Phase = corev1.PodRunning
	vp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	w := newWorld(t, grove.SetOf(pcs), []grove.Clique{mkClique(0, cliqueState{wasAvail: true, wasCarrier: carriers}), v, mkClique(1, cliqueState{wasAvail: true, wasCarrier: carriers})},
		append(pods(failed, ready, ready, ready), vp))
	schemas := seedStatus
	if carriers {
		schemas = fieldSchemas{}
	}
	grove.SetTrainingStatus(w.pcs, grove.TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, StartTime: &metav1.Time{Time: t0.Add(-time.Minute)}}, schemas)
	return w
}

// seedStatus is the seed schema's PodCliqueSet status: the Training status
// fields an earlier shepherd kept there.
var seedStatus = fieldSchemas{"status.phase", "status.restartCount", "status.startTime"}

// final is what a run must end with whatever crashed on the way.
type final struct {
	Phase   shepherdv1alpha1.Phase
	Count   int32
	Failed  string
	Markers map[string]string
	Pods    []string
}

func (w *world) final() final {
	st := w.input().State
	f := final{Phase: st.Phase, Count: st.RestartCount, Markers: map[string]string{}}
	for _, c := range st.Conditions {
		if c.Type == api.ConditionFailed {
			f.Failed = c.Reason
		}
	}
	for name, e := range st.Cliques {
		if e.Marker != nil {
			f.Markers[name] = e.Marker.String()
		}
	}
	for _, p := range w.pods {
		f.Pods = append(f.Pods, p.Name)
	}
	return f
}

func eventsOf(tr trace, skip int) []string {
	var out []string
	for i, s := range tr {
		if s.landed && i != skip {
			out = append(out, reasons(s.d.Events)...)
		}
	}
	return out
}

// TestRestartCrashPoints states the restart protocol's guarantee (package
// doc, "Restarts: one write per reconcile"): a crash between any two writes
// — and a write delivered twice, as a reconcile on a cache that has not
// seen it would decide it again — neither loses nor double-counts a
// restart, and emits no event twice. For every write k of a reference run:
//
//   - crash after write k, before its events: the run resumed from the
//     objects ends in the same state; only write k's events are missing;
//   - write k decided again after it landed (stale cache): the status and
//     the markers are refused (optimistic lock), the deletes find nothing;
//     the run ends in the same state with the same events.
func TestRestartCrashPoints(t *testing.T) {
	for _, sc := range []struct {
		name        string
		maxRestarts int32
		carriers    bool
		want        final
		wantEvents  []string
	}{
		{name: "restart, from the seed's status fields", maxRestarts: 1, want: final{Phase: shepherdv1alpha1.PhaseRunning, Count: 1},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventReplicaRestarting}},
		{name: "restart, from Grove's carriers", maxRestarts: 1, carriers: true, want: final{Phase: shepherdv1alpha1.PhaseRunning, Count: 1},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventReplicaRestarting}},
		{name: "budget used up, from Grove's carriers", maxRestarts: 0, carriers: true,
			want:       final{Phase: shepherdv1alpha1.PhaseFailed, Failed: api.ReasonMaxRestartsExceeded},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			ref := crashScenario(t, sc.maxRestarts, sc.carriers)
			var snaps []*world
			var tr trace
			for range 30 {
				snaps = append(snaps, ref.clone())
				rv := ref.readRV()
				d := Decide(ref.clk, ref.input())
				if d.Write == WriteNone {
					break
				}
				tr = append(tr, step{d: d, landed: ref.apply(d, rv)})
			}
			want := ref.final()
			want.Markers, want.Pods = nil, nil
			got := want
			if diff := cmp.Diff(sc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("reference run (-want +got):\n%s\nwrites:%s", diff, tr)
			}
			if diff := cmp.Diff(sc.wantEvents, eventsOf(tr, -1)); diff != "" {
				t.Fatalf("reference events (-want +got):\n%s", diff)
			}
			refFinal := ref.final()
			for k := range tr {
				t.Run(fmt.Sprintf("crash after write %d (%s)", k, tr[k].d.Write), func(t *testing.T) {
					w := snaps[k].clone()
					w.t = t
					if !w.apply(tr[k].d, w.readRV()) {
						t.Fatalf("write %d did not land on its own snapshot", k)
					}
					rest := w.run()
					if diff := cmp.Diff(refFinal, w.final()); diff != "" {
						t.Errorf("final state (-reference +resumed):\n%s", diff)
					}
					got := append(eventsOf(tr[:k+1], k), eventsOf(rest, -1)...)
					if diff := cmp.Diff(eventsOf(tr, k), got, cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("events (-reference without write %d's +resumed):\n%s", k, diff)
					}
				})
				t.Run(fmt.Sprintf("write %d (%s) decided again on a stale cache", k, tr[k].d.Write), func(t *testing.T) {
					w := snaps[k].clone()
					w.t = t
					readRV := w.readRV()
					w.apply(tr[k].d, readRV)
					again := Decide(w.clk, snaps[k].input()) // the cache before write k
					if landed := w.apply(again, readRV); landed && again.Write != WriteDelete && again.Write != WriteScale {
						t.Fatalf("the stale %s write landed: %+v", again.Write, again)
					}
					rest := w.run()
					if diff := cmp.Diff(refFinal, w.final()); diff != "" {
						t.Errorf("final state (-reference +with the stale write):\n%s", diff)
					}
					got := append(eventsOf(tr[:k+1], -1), eventsOf(rest, -1)...)
					if diff := cmp.Diff(eventsOf(tr, -1), got, cmpopts.EquateEmpty()); diff != "" {
						t.Errorf("events (-reference +with the stale write):\n%s", diff)
					}
				})
			}
		})
	}
}
