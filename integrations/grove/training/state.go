package training

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// RecordManager is the field manager of a Training PodCliqueSet's
// WorkloadRecord, which this package alone writes.
const RecordManager = "shepherd-training"

// State is what shepherd keeps about a Training PodCliqueSet — the status
// of its WorkloadRecord — as Decide reads and writes it. Nothing of it is
// kept on the PodCliqueSet or its PodCliques: Grove replaces a PodClique's
// annotations with its template's on every reconcile.
type State struct {
	Phase        shepherdv1alpha1.Phase
	RestartCount int32
	StartTime    *metav1.Time
	// Conditions: Failed (reason MaxRestartsExceeded or MaxRuntimeExceeded)
	// once the set failed.
	Conditions []metav1.Condition
	// Cliques are kept per PodClique name.
	Cliques map[string]CliqueState
}

// CliqueState is what shepherd keeps about one PodClique of the set.
type CliqueState struct {
	// UID is the PodClique incarnation the entry is about: an entry of
	// another UID (a PodClique deleted and created again) says nothing.
	UID types.UID
	// WasAvailable is the sticky availability bit, the restart gate.
	WasAvailable bool
	// Succeeded: all of the clique's pods exited 0 (sticky).
	Succeeded bool
	// Marker is the clique's last restart marker, done or not.
	Marker *gang.RestartMarker
}

// clique returns c's entry, the zero entry when there is none for this
// incarnation of c.
func (s State) clique(c *grove.Clique) CliqueState {
	if e, ok := s.Cliques[c.Name]; ok && (e.UID == "" || e.UID == c.UID) {
		return e
	}
	return CliqueState{UID: c.UID}
}

// withClique returns a copy of s with c's entry e.
func (s State) withClique(name string, e CliqueState) State {
	out := s.clone()
	out.Cliques[name] = e
	return out
}

func (s State) clone() State {
	out := s
	out.Conditions = slices.Clone(s.Conditions)
	out.Cliques = maps.Clone(s.Cliques)
	if out.Cliques == nil {
		out.Cliques = map[string]CliqueState{}
	}
	return out
}

// equal reports whether s and o say the same.
func (s State) equal(o State) bool {
	return s.Phase == o.Phase && s.RestartCount == o.RestartCount &&
		(s.StartTime == nil) == (o.StartTime == nil) && (s.StartTime == nil || s.StartTime.Equal(o.StartTime)) &&
		equality.Semantic.DeepEqual(s.Conditions, o.Conditions) && equality.Semantic.DeepEqual(nonEmpty(s.Cliques), nonEmpty(o.Cliques))
}

func nonEmpty(m map[string]CliqueState) map[string]CliqueState {
	out := map[string]CliqueState{}
	for k, v := range m {
		if v.WasAvailable || v.Succeeded || v.Marker != nil {
			out[k] = v
		}
	}
	return out
}

// StateOf reads the State a record holds.
func StateOf(rec *shepherdv1alpha1.WorkloadRecord) State {
	st := rec.Status
	s := State{Phase: shepherdv1alpha1.Phase(st.Phase), RestartCount: ptr.Deref(st.RestartCount, 0), StartTime: st.StartTime,
		Conditions: slices.Clone(st.Conditions), Cliques: map[string]CliqueState{}}
	for _, c := range st.Cliques {
		e := CliqueState{UID: c.UID, WasAvailable: c.WasAvailable, Succeeded: c.Succeeded}
		if r := c.Restart; r != nil {
			e.Marker = &gang.RestartMarker{Restart: r.Restart, Pods: slices.Clone(r.Pods), Failed: r.Failed, Done: r.Done}
		}
		s.Cliques[c.Name] = e
	}
	return s
}

// Record is the WorkloadRecord of pcs holding s: the phase with the reason
// and message of its Failed condition, the start time, the restart count,
// and an entry per PodClique with something to keep, by name.
func (s State) Record(pcs *grove.Set) *shepherdv1alpha1.WorkloadRecord {
	rec := record.For(pcs.Served, pcs.Served.GroupVersionKind())
	st := &rec.Status
	st.Phase = shepherdv1alpha1.Phase(s.Phase)
	if c := meta.FindStatusCondition(s.Conditions, api.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		st.Reason, st.Message = c.Reason, c.Message
	}
	st.StartTime = s.StartTime
	st.RestartCount = ptr.To(s.RestartCount)
	st.Conditions = slices.Clone(s.Conditions)
	for _, name := range slices.Sorted(maps.Keys(nonEmpty(s.Cliques))) {
		e := s.Cliques[name]
		c := shepherdv1alpha1.CliqueRecord{Name: name, UID: e.UID, WasAvailable: e.WasAvailable, Succeeded: e.Succeeded}
		if m := e.Marker; m != nil {
			c.Restart = &shepherdv1alpha1.CliqueRestart{Restart: m.Restart, Pods: slices.Clone(m.Pods), Failed: m.Failed, Done: m.Done}
		}
		st.Cliques = append(st.Cliques, c)
	}
	return rec
}

// Upgrade is the State an earlier shepherd kept on the objects themselves,
// read once, when the set has no record yet: the Training status from the
// seed fields or the carriers shepherd.dev/phase, restart-count and
// start-time (grove.TrainingStatusOf), the Failed condition of the set's
// status, and per PodClique the wasAvailable bit (field or
// shepherd.dev/was-available), the Succeeded condition and the
// shepherd.dev/restart marker. A set upgraded in the middle of a restart
// loses neither the count nor the restart in flight. A carrier that does not
// parse is an error naming it; a marker that does not parse is ignored.
// Only the PodCliques the set controls count (owned): a PodClique of a
// deleted set of the same name says nothing about this one.
func Upgrade(in Input) (State, error) {
	pcs := in.Set
	ts, err := grove.TrainingStatusOf(pcs)
	if err != nil {
		return State{}, err
	}
	s := State{Phase: ts.Phase, RestartCount: ts.RestartCount, StartTime: ts.StartTime, Cliques: map[string]CliqueState{}}
	if c := meta.FindStatusCondition(pcs.Status.Conditions, api.ConditionFailed); c != nil {
		s.Conditions = []metav1.Condition{*c}
	}
	cliques, _ := owned(in)
	for _, c := range cliques {
		m, _ := gang.Marker(c.Annotations)
		e := CliqueState{UID: c.UID, WasAvailable: grove.WasAvailable(c), Succeeded: meta.IsStatusConditionTrue(c.Status.Conditions, api.ConditionSucceeded), Marker: m}
		if e.WasAvailable || e.Succeeded || e.Marker != nil {
			s.Cliques[c.Name] = e
		}
	}
	return s, nil
}
