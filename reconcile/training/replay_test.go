package training

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// world is the API as the Training set controller sees it, in memory:
// Decide's one write per reconcile is applied to it the way the apiserver
// applies the controller's requests — the status and markers under an
// optimistic lock (the resourceVersion the decision read), deletes with
// UID preconditions.
type world struct {
	t       *testing.T
	clk     clock.PassiveClock
	schemas knob.FieldSchemas
	pcs     *grovev1alpha1.PodCliqueSet
	cliques []grovev1alpha1.PodClique
	pods    []corev1.Pod
	rv      int
	// cliqueController plays this package's PodClique controller between
	// reconciles: it keeps each clique's wasAvailable (held false while a
	// restart marker is active), its own write.
	cliqueController bool
}

// tick is the PodClique controller's writes since the last reconcile
// (DecideClique, as that controller decides them).
func (w *world) tick() {
	if !w.cliqueController {
		return
	}
	for i := range w.cliques {
		c := &w.cliques[i]
		var owned []corev1.Pod
		for _, p := range w.pods {
			if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == c.UID {
				owned = append(owned, p)
			}
		}
		want, _ := DecideClique(w.clk, c, owned, w.schemas)
		if !equality.Semantic.DeepEqual(want, c) {
			*c = *want
			c.ResourceVersion = w.bump()
		}
	}
}

func newWorld(t *testing.T, pcs *grovev1alpha1.PodCliqueSet, cliques []grovev1alpha1.PodClique, pods []corev1.Pod) *world {
	// The seed schema by default: the tests' sets keep their Training
	// status in the status fields.
	w := &world{t: t, clk: clockAt(t0), schemas: seedSchema, pcs: pcs.DeepCopy(), pods: slices.Clone(pods)}
	for _, c := range cliques {
		w.cliques = append(w.cliques, *c.DeepCopy())
	}
	return w
}

// seedSchema is a served schema with the seed's Training status fields.
var seedSchema = fieldSchemas{"status.phase", "status.restartCount", "status.startTime"}

func clockAt(t time.Time) clock.PassiveClock { return clocktesting.NewFakePassiveClock(t) }

// clone is a snapshot of w (what a cache may still show).
func (w *world) clone() *world {
	out := newWorld(w.t, w.pcs, w.cliques, w.pods)
	out.clk, out.schemas, out.rv, out.cliqueController = w.clk, w.schemas, w.rv, w.cliqueController
	return out
}

func (w *world) input() Input {
	return input(w.t, w.pcs, slices.Clone(w.cliques), slices.Clone(w.pods))
}

func (w *world) bump() string { w.rv++; return strconv.Itoa(w.rv) }

// apply makes d's write. It reports whether the write landed; a status
// write lands as the commit (committed) or not at all.
func (w *world) apply(d Decision, readRV string) bool {
	switch d.Write {
	case WriteStatus:
		if readRV != w.pcs.ResourceVersion {
			return false // Conflict
		}
		w.pcs = d.Status.Apply(w.pcs, w.schemas)
		w.pcs.ResourceVersion = w.bump()
	case WriteMarker:
		i := slices.IndexFunc(w.cliques, func(c grovev1alpha1.PodClique) bool { return c.Name == d.Mark.Clique })
		if i < 0 || w.cliques[i].ResourceVersion != d.Mark.ResourceVersion {
			return false // NotFound or Conflict
		}
		w.cliques[i].Annotations = mapWith(w.cliques[i].Annotations, api.AnnotationRestart, d.Mark.Marker.String())
		w.cliques[i].ResourceVersion = w.bump()
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

// partialStatus applies only the first request of a status write on
// Grove's schema — the carriers, not the conditions — as a crash between
// the two would leave it.
func (w *world) partialStatus(d Decision) {
	want := d.Status.Apply(w.pcs, w.schemas)
	w.pcs.Annotations = want.Annotations
	w.pcs.ResourceVersion = w.bump()
}

func mapWith(m map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	out[k] = v
	return out
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
		w.tick()
		d := Decide(w.clk, w.input())
		if d.Write == WriteNone {
			return append(tr, step{d: d})
		}
		tr = append(tr, step{d: d, landed: w.apply(d, w.pcs.ResourceVersion)})
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
	st, err := grove.TrainingStatusOf(w.pcs)
	if err != nil {
		w.t.Fatal(err)
	}
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
func runOutcome(t *testing.T, pcs *grovev1alpha1.PodCliqueSet, cliques []grovev1alpha1.PodClique, pods []corev1.Pod) outcome {
	t.Helper()
	w := newWorld(t, pcs, cliques, pods)
	return w.outcome(w.run())
}

// crashScenario is a replica 0 whose two PodCliques must both be marked,
// with a failed pod, budget maxRestarts; replica 1 healthy.
func crashScenario(t *testing.T, maxRestarts int32, schemas knob.FieldSchemas) *world {
	pcs := set(maxRestarts, nil, nil)
	pcs.Spec.Template.Cliques = append(pcs.Spec.Template.Cliques, &grovev1alpha1.PodCliqueTemplateSpec{Name: "v", Spec: grovev1alpha1.PodCliqueSpec{Replicas: 1}})
	pcs.Status.Phase, pcs.Status.StartTime = grovev1alpha1.PhaseRunning, &metav1.Time{Time: t0.Add(-time.Minute)}
	v := mkClique(0, cliqueState{wasAvail: true})
	v.Name, v.UID, v.Spec.Replicas = "pcs-0-v", "cv", 1
	vp := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pcs-0-v-0", UID: "pv", OwnerReferences: controller(api.KindPodClique, "pcs-0-v", "cv")}}
	vp.Status.Phase = corev1.PodRunning
	vp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	w := newWorld(t, pcs, []grovev1alpha1.PodClique{mkClique(0, cliqueState{wasAvail: true}), v, mkClique(1, cliqueState{wasAvail: true})},
		append(pods(failed, ready, ready, ready), vp))
	w.cliqueController = true
	if schemas != nil {
		w.schemas = schemas
		// Grove's schema: the status lives in the carriers.
		w.pcs = Status{Phase: pcs.Status.Phase, StartTime: pcs.Status.StartTime}.Apply(w.pcs, schemas)
		w.pcs.Status.Phase, w.pcs.Status.StartTime = "", nil
	}
	return w
}

// final is what a run must end with whatever crashed on the way.
type final struct {
	Phase   grovev1alpha1.PodCliqueSetPhase
	Count   int32
	Failed  string
	Markers map[string]string
	Pods    []string
}

func (w *world) final() final {
	st, err := grove.TrainingStatusOf(w.pcs)
	if err != nil {
		w.t.Fatal(err)
	}
	f := final{Phase: st.Phase, Count: st.RestartCount, Markers: map[string]string{}}
	for _, c := range w.pcs.Status.Conditions {
		if c.Type == api.ConditionFailed {
			f.Failed = c.Reason
		}
	}
	for _, c := range w.cliques {
		f.Markers[c.Name] = c.Annotations[api.AnnotationRestart]
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
		schemas     knob.FieldSchemas
		want        final
		wantEvents  []string
	}{
		{name: "restart, seed schema", maxRestarts: 1, want: final{Phase: grovev1alpha1.PhaseRunning, Count: 1},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventReplicaRestarting}},
		{name: "restart, Grove's schema (carriers)", maxRestarts: 1, schemas: fieldSchemas{}, want: final{Phase: grovev1alpha1.PhaseRunning, Count: 1},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventReplicaRestarting}},
		{name: "budget used up, Grove's schema", maxRestarts: 0, schemas: fieldSchemas{},
			want:       final{Phase: grovev1alpha1.PhaseFailed, Failed: api.ReasonMaxRestartsExceeded},
			wantEvents: []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			ref := crashScenario(t, sc.maxRestarts, sc.schemas)
			var snaps []*world
			var tr trace
			for range 30 {
				ref.tick()
				snaps = append(snaps, ref.clone())
				d := Decide(ref.clk, ref.input())
				if d.Write == WriteNone {
					break
				}
				tr = append(tr, step{d: d, landed: ref.apply(d, ref.pcs.ResourceVersion)})
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
					if !w.apply(tr[k].d, w.pcs.ResourceVersion) {
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
					readRV := w.pcs.ResourceVersion
					w.apply(tr[k].d, readRV)
					again := Decide(w.clk, snaps[k].input()) // the cache before write k
					if landed := w.apply(again, readRV); landed && again.Write != WriteDelete {
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
			if sc.schemas != nil {
				// Grove's schema: a status write is two requests; a crash
				// between them (carriers written, conditions not) loses
				// nothing either.
				for k := range tr {
					if tr[k].d.Write != WriteStatus {
						continue
					}
					t.Run(fmt.Sprintf("crash inside status write %d", k), func(t *testing.T) {
						w := snaps[k].clone()
						w.t = t
						w.partialStatus(tr[k].d)
						w.run()
						if diff := cmp.Diff(refFinal, w.final()); diff != "" {
							t.Errorf("final state (-reference +resumed):\n%s", diff)
						}
					})
				}
			}
		})
	}
}
