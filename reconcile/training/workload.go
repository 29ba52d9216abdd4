package training

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// Input is what the PodCliqueSet decision reads.
type Input struct {
	Set *grovev1alpha1.PodCliqueSet
	// Status is the set's Training status as read (grove.TrainingStatusOf:
	// the fields, or their carriers).
	Status grove.TrainingStatus
	// MaxRestarts and MaxRuntime are the set's trainingSpec as read
	// (grove.TrainingLimits); MaxRestarts unset is 0 (D-PCS-4).
	MaxRestarts int32
	MaxRuntime  *time.Duration
	// Cliques are the candidate PodCliques (by Grove's part-of label) that
	// are not being deleted; Decide keeps those the set controls.
	Cliques []grovev1alpha1.PodClique
	// Groups are the candidate PodCliqueScalingGroups; those the set
	// controls own PodCliques of the set.
	Groups []grovev1alpha1.PodCliqueScalingGroup
	// Pods are the candidate pods (by label); Decide keeps those a kept
	// PodClique controls.
	Pods []corev1.Pod
}

// Status is the part of PodCliqueSet status this package owns.
type Status struct {
	Phase        grovev1alpha1.PodCliqueSetPhase
	RestartCount int32
	StartTime    *metav1.Time
	Conditions   []metav1.Condition
}

// PodRef names a pod to delete.
type PodRef struct {
	Name string
	UID  types.UID
}

// Event is an event to emit, about the set or (Clique != "") a PodClique.
type Event struct {
	Clique       string
	Type         string
	Reason, Note string
}

// Write is the one write a reconcile of a Training PodCliqueSet makes.
type Write int

const (
	// WriteNone: nothing to write; look again at RequeueAfter (or on a
	// change).
	WriteNone Write = iota
	// WriteStatus: the set's Training status (Decision.Status) — the
	// commit of a phase, a startTime, a restart count or a failure — then
	// Decision.Events and the metrics.
	WriteStatus
	// WriteMarker: one PodClique's restart marker (Decision.Mark).
	WriteMarker
	// WriteDelete: delete pods (Decision.Delete), with UID preconditions.
	WriteDelete
)

func (w Write) String() string {
	switch w {
	case WriteNone:
		return "None"
	case WriteStatus:
		return "Status"
	case WriteMarker:
		return "Marker"
	case WriteDelete:
		return "Delete"
	}
	return "Unknown"
}

// Mark is a restart marker to put on a PodClique: a merge patch of that
// one annotation, guarded by the resourceVersion the decision read, so a
// decision made on a stale cache never lands.
type Mark struct {
	Clique          string
	ResourceVersion string
	Marker          gang.RestartMarker
}

// Decision is what one reconcile of a Training set does: at most one write
// (Write says which; the other write fields are empty), then — only once a
// status write has landed — Events and the metrics.
type Decision struct {
	Write Write
	// Status is the set's Training status to commit (WriteStatus).
	Status Status
	// Mark is the marker to write (WriteMarker).
	Mark Mark
	// Delete are the pods to delete (WriteDelete).
	Delete []PodRef
	// Events go out after the status write.
	Events []Event
	// Restarts is how many restarts the status write commits (the
	// metric); Failure the reason of a failure it commits, "" for none.
	Restarts int32
	Failure  string
	// RequeueAfter is when to look again; zero means only on change.
	RequeueAfter time.Duration
}

// restartingPoll is how often a replica with a restart in flight is looked
// at besides the watch events that normally move it on.
const restartingPoll = time.Second

// Decide runs the Training lifecycle of one PodCliqueSet: from the objects
// as read and the clock, the next write — the first that applies of:
//
//  1. a final phase: Succeeded (every PodClique succeeded) or Failed
//     (maxRuntime passed) — the status, with its events;
//  2. a restart in flight (a replica with an active marker, restart N)
//     with a PodClique not yet marked: mark it (restart N, its pods);
//  3. the status as the objects say it should be: phase Pending/Running,
//     startTime from the pods, restartCount = the highest N in flight,
//     with PodCliqueFailed and ReplicaRestarting for each restart it
//     commits;
//  4. the pods the restarts in flight replace that are not yet being
//     deleted: delete them;
//  5. a new breach: mark the first PodClique of the lowest breached
//     replica for restart M+1 (M the highest of restartCount and every
//     marker), or, with the budget used up, the Failed status;
//  6. a PodClique through its restart (its replaced pods gone or
//     terminating, wasAvailable reset): its done marker.
//
// Everything it needs is in the objects, so a reconcile after a crash
// between any two writes decides the write that was next.
func Decide(clk clock.PassiveClock, in Input) Decision {
	now := clk.Now()
	cur := Status{Phase: in.Status.Phase, RestartCount: in.Status.RestartCount, StartTime: in.Status.StartTime, Conditions: in.Set.Status.Conditions}
	switch cur.Phase {
	case grovev1alpha1.PhaseSucceeded:
		return Decision{}
	case grovev1alpha1.PhaseFailed:
		return decideFailed(in, cur, now)
	}
	v := view(in)
	next := cur
	next.Conditions = slices.Clone(cur.Conditions)
	v.progress(&next, now)

	// 1. Final phases. Success is checked before maxRuntime: a set that
	// finished in time but is reconciled after the limit (shepherd was
	// down, or the other controller wrote Succeeded a moment late)
	// succeeded; its pods' exits say so.
	if v.allSucceeded() {
		next.Phase = grovev1alpha1.PhaseSucceeded
		return Decision{Write: WriteStatus, Status: next, Events: []Event{{Type: corev1.EventTypeNormal, Reason: api.EventWorkloadSucceeded,
			Note: fmt.Sprintf("all %d PodCliques succeeded after %d restarts", len(v.cliques), next.RestartCount)}}}
	}
	var wait gang.MinRequeue
	if in.MaxRuntime != nil && next.StartTime != nil {
		left := next.StartTime.Add(*in.MaxRuntime).Sub(now)
		if left < 0 {
			return fail(in, next, nil, api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s (started %s)",
				*in.MaxRuntime, next.StartTime.UTC().Format(time.RFC3339)), api.EventMaxRuntimeExceeded, now)
		}
		wait.Add(left)
	}

	// 2. Restarts in flight: every PodClique of the replica marked.
	inflight := v.inFlight()
	for _, r := range inflight {
		if c := r.unmarked(); c != nil {
			return Decision{Write: WriteMarker, Mark: v.mark(c, r.n, v.breached(c)), RequeueAfter: restartingPoll}
		}
	}

	// 3. The status: progress, and the count of every restart in flight.
	var events []Event
	for _, r := range inflight {
		if r.n <= cur.RestartCount {
			continue // committed before
		}
		next.RestartCount = max(next.RestartCount, r.n)
		for _, c := range r.cliques {
			if m, _ := gang.Marker(c.Annotations); m != nil && m.Restart == r.n && m.Failed {
				events = append(events, cliqueFailed(c.Name, r.idx, r.n))
			}
		}
		events = append(events, Event{Type: corev1.EventTypeNormal, Reason: api.EventReplicaRestarting,
			Note: fmt.Sprintf("restarting replica %d: restart %d of maxRestarts %d", r.idx, r.n, in.MaxRestarts)})
	}
	if len(inflight) > 0 {
		wait.Add(restartingPoll)
	}
	if !next.equal(cur) {
		return Decision{Write: WriteStatus, Status: next, Events: events, Restarts: next.RestartCount - cur.RestartCount, RequeueAfter: time.Duration(wait)}
	}

	// 4. The pods the restarts in flight replace. A pod already
	// terminating (deletionTimestamp set) is as good as gone: on a lost
	// node it may stay Terminating for ever, and the restart must not wait
	// for it. It counts for nothing (not ready, not succeeded) meanwhile.
	var victims []PodRef
	for _, r := range inflight {
		victims = append(victims, r.condemned(v.podsOf)...)
	}
	if len(victims) > 0 {
		return Decision{Write: WriteDelete, Delete: victims, RequeueAfter: time.Duration(wait)}
	}

	// 5. A new breach, in a replica without a restart in flight: one
	// restart at a time, numbered after every restart ever marked.
	busy := map[int32]bool{}
	for _, r := range inflight {
		busy[r.idx] = true
	}
	numbered := max(next.RestartCount, v.highestMarker())
	for _, idx := range v.replicas {
		if busy[idx] {
			continue
		}
		breached := v.breachedOf(idx)
		if len(breached) == 0 {
			continue
		}
		if numbered < in.MaxRestarts {
			wait.Add(restartingPoll)
			return Decision{Write: WriteMarker, Mark: v.mark(v.byReplica[idx][0], numbered+1, slices.Contains(breached, v.byReplica[idx][0])),
				RequeueAfter: time.Duration(wait)}
		}
		var failed []Event
		for _, c := range breached {
			failed = append(failed, cliqueFailed(c.Name, idx, 0))
		}
		return fail(in, next, failed, api.ReasonMaxRestartsExceeded, fmt.Sprintf("replica %d failed and the restart budget is used up (%d of maxRestarts %d)",
			idx, numbered, in.MaxRestarts), api.EventMaxRestartsExceeded, now)
	}

	// 6. PodCliques through their restart.
	for _, r := range inflight {
		if c := r.through(v.podsOf); c != nil {
			// The done marker keeps the pods it replaced: they never
			// count again, even lingering in Terminating.
			m, _ := gang.ActiveMarker(c.Annotations)
			done := *m
			done.Done = true
			return Decision{Write: WriteMarker, Mark: Mark{Clique: c.Name, ResourceVersion: c.ResourceVersion, Marker: done},
				RequeueAfter: time.Duration(wait)}
		}
	}
	return Decision{RequeueAfter: time.Duration(wait)}
}

// decideFailed keeps a Failed set final: the Failed condition present (on
// Grove's schema the phase, a carrier, is committed before the condition,
// and Grove rewrites its atomic conditions list without a lock; a
// condition lost either way is put back with the reason the durable state
// still shows), then every pod the set owns deleted.
func decideFailed(in Input, cur Status, now time.Time) Decision {
	if meta.FindStatusCondition(cur.Conditions, api.ConditionFailed) == nil {
		reason, msg := api.ReasonMaxRestartsExceeded, fmt.Sprintf("the restart budget is used up (%d of maxRestarts %d)", cur.RestartCount, in.MaxRestarts)
		if in.MaxRuntime != nil && cur.StartTime != nil && now.Sub(cur.StartTime.Time) > *in.MaxRuntime {
			reason, msg = api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s", *in.MaxRuntime)
		}
		next := cur
		next.Conditions = gang.SetCondition(cur.Conditions, metav1.Condition{
			Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
		}, now)
		return Decision{Write: WriteStatus, Status: next}
	}
	_, pods := owned(in)
	if victims := livePods(pods); len(victims) > 0 {
		return Decision{Write: WriteDelete, Delete: victims}
	}
	return Decision{}
}

// fail is the status write of a failure: phase Failed and the Failed
// condition, with the events (the pods go in the reconciles after it, see
// decideFailed).
func fail(in Input, next Status, events []Event, reason, msg, event string, now time.Time) Decision {
	next.Phase = grovev1alpha1.PhaseFailed
	next.Conditions = gang.SetCondition(next.Conditions, metav1.Condition{
		Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
	}, now)
	events = append(events, Event{Type: corev1.EventTypeWarning, Reason: event, Note: msg + "; terminating all pods"})
	return Decision{Write: WriteStatus, Status: next, Events: events, Failure: reason}
}

// equal reports whether s and o say the same.
func (s Status) equal(o Status) bool {
	return s.Phase == o.Phase && s.RestartCount == o.RestartCount &&
		(s.StartTime == nil) == (o.StartTime == nil) && (s.StartTime == nil || s.StartTime.Equal(o.StartTime)) &&
		equality.Semantic.DeepEqual(s.Conditions, o.Conditions)
}

// setView is what Decide reads of a set, by ownership (see owned).
type setView struct {
	in        Input
	cliques   []*grovev1alpha1.PodClique
	pods      []corev1.Pod
	podsOf    map[types.UID][]corev1.Pod
	byReplica map[int32][]*grovev1alpha1.PodClique
	// replicas are the replica indices, ascending.
	replicas []int32
}

func view(in Input) *setView {
	v := &setView{in: in, byReplica: map[int32][]*grovev1alpha1.PodClique{}}
	v.cliques, v.pods = owned(in)
	v.podsOf = podsByOwner(v.pods)
	for _, c := range v.cliques {
		if idx := gang.PCSReplicaIndex(c.Labels); idx >= 0 {
			if _, ok := v.byReplica[idx]; !ok {
				v.replicas = append(v.replicas, idx)
			}
			v.byReplica[idx] = append(v.byReplica[idx], c)
		}
	}
	slices.Sort(v.replicas)
	return v
}

// progress moves Pending to Running once a pod of the set started and
// records startTime once: when the set's pods started (their own
// status.startTime), not when shepherd noticed.
func (v *setView) progress(s *Status, now time.Time) {
	started := slices.ContainsFunc(v.pods, func(p corev1.Pod) bool { return gang.PodStarted(&p) })
	if s.Phase == "" || s.Phase == grovev1alpha1.PhasePending {
		s.Phase = grovev1alpha1.PhasePending
		if started {
			s.Phase = grovev1alpha1.PhaseRunning
		}
	}
	if s.Phase == grovev1alpha1.PhaseRunning && s.StartTime == nil {
		t := metav1.NewTime(firstStart(v.pods, now))
		s.StartTime = &t
	}
}

func (v *setView) allSucceeded() bool { return allSucceeded(v.in.Set, v.cliques) }

// restart is one replica's restart in flight: restart n, the highest
// active marker of the replica.
type restart struct {
	idx     int32
	n       int32
	cliques []*grovev1alpha1.PodClique
}

// inFlight lists the replicas with a restart in flight, by index.
func (v *setView) inFlight() []restart {
	var out []restart
	for _, idx := range v.replicas {
		if n := inFlight(v.byReplica[idx]); n > 0 {
			out = append(out, restart{idx: idx, n: n, cliques: v.byReplica[idx]})
		}
	}
	return out
}

// unmarked is the first PodClique of the replica not yet marked for the
// restart (stopped between marking two PodCliques; none of its pods was
// deleted yet), nil when every one is.
func (r restart) unmarked() *grovev1alpha1.PodClique {
	for _, c := range r.cliques {
		if m, _ := gang.Marker(c.Annotations); m == nil || m.Restart < r.n {
			return c
		}
	}
	return nil
}

// condemned lists the pods the restart replaces that are not yet being
// deleted.
func (r restart) condemned(podsOf map[types.UID][]corev1.Pod) []PodRef {
	var out []PodRef
	for _, c := range r.cliques {
		m, _ := gang.ActiveMarker(c.Annotations)
		if m == nil || m.Restart != r.n {
			continue
		}
		for _, p := range podsOf[c.UID] {
			if m.Condemned(p.UID) && p.DeletionTimestamp == nil {
				out = append(out, PodRef{Name: p.Name, UID: p.UID})
			}
		}
	}
	return out
}

// through is the first PodClique whose restart is over — its replaced pods
// gone or terminating, and its wasAvailable reset (package training's
// clique controller holds it false while the marker is active) — nil when
// none is.
func (r restart) through(podsOf map[types.UID][]corev1.Pod) *grovev1alpha1.PodClique {
	for _, c := range r.cliques {
		m, _ := gang.ActiveMarker(c.Annotations)
		if m == nil || m.Restart != r.n || grove.WasAvailable(c) {
			continue
		}
		left := slices.ContainsFunc(podsOf[c.UID], func(p corev1.Pod) bool { return m.Condemned(p.UID) && p.DeletionTimestamp == nil })
		if !left {
			return c
		}
	}
	return nil
}

// mark is the marker of restart n for a PodClique: the restart number, the
// UIDs of its pods now, and failed when its breach caused the restart.
func (v *setView) mark(c *grovev1alpha1.PodClique, n int32, failed bool) Mark {
	m := gang.RestartMarker{Restart: n, Failed: failed}
	for _, p := range v.podsOf[c.UID] {
		m.Pods = append(m.Pods, p.UID)
	}
	return Mark{Clique: c.Name, ResourceVersion: c.ResourceVersion, Marker: m}
}

func (v *setView) breached(c *grovev1alpha1.PodClique) bool {
	return len(breachedCliques([]*grovev1alpha1.PodClique{c}, v.podsOf)) > 0
}

func (v *setView) breachedOf(idx int32) []*grovev1alpha1.PodClique {
	return breachedCliques(v.byReplica[idx], v.podsOf)
}

// highestMarker is the highest restart number any marker of the set names,
// done or not.
func (v *setView) highestMarker() int32 {
	var n int32
	for _, idx := range v.replicas {
		n = max(n, highestMarker(v.byReplica[idx]))
	}
	return n
}

// owned returns the set's PodCliques and pods by controller ownership: a
// PodClique controlled by the set or by a PCSG the set controls, a pod
// controlled by one of those PodCliques.
func owned(in Input) ([]*grovev1alpha1.PodClique, []corev1.Pod) {
	owners := map[types.UID]bool{in.Set.UID: true}
	for i := range in.Groups {
		if controlledBy(&in.Groups[i], in.Set.UID) {
			owners[in.Groups[i].UID] = true
		}
	}
	var cliques []*grovev1alpha1.PodClique
	mine := map[types.UID]bool{}
	for i := range in.Cliques {
		c := &in.Cliques[i]
		if ref := metav1.GetControllerOf(c); ref != nil && owners[ref.UID] {
			cliques = append(cliques, c)
			mine[c.UID] = true
		}
	}
	var pods []corev1.Pod
	for _, p := range in.Pods {
		if ref := metav1.GetControllerOf(&p); ref != nil && mine[ref.UID] {
			pods = append(pods, p)
		}
	}
	return cliques, pods
}

func controlledBy(o metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && uid != "" && ref.UID == uid
}

// firstStart is when the set's pods started: the earliest status.startTime
// of a started pod (the kubelet's, so shepherd's own downtime does not
// count), never later than now; now when no started pod has one.
func firstStart(pods []corev1.Pod, now time.Time) time.Time {
	first := now.Truncate(time.Second)
	for i := range pods {
		p := &pods[i]
		if gang.PodStarted(p) && p.Status.StartTime != nil && p.Status.StartTime.Time.Before(first) {
			first = p.Status.StartTime.Time
		}
	}
	return first
}

func cliqueFailed(clique string, idx, restart int32) Event {
	note := fmt.Sprintf("PodClique %s of replica %d breached MinAvailable", clique, idx)
	if restart > 0 {
		note += fmt.Sprintf("; replica restart %d", restart)
	}
	return Event{Clique: clique, Type: corev1.EventTypeWarning, Reason: api.EventPodCliqueFailed, Note: note}
}

// breachedCliques returns the replica's breached PodCliques, read from
// their pods (gang.CliqueAvailability: below minAvailable after having been
// available) — not from MinAvailableBreached, which Grove may be the one to
// write, with its own rules and its own terminationDelay. A Training breach
// is acted on at once (delay 0, see the package doc). A clique that has
// Succeeded is done, not breached.
func breachedCliques(cliques []*grovev1alpha1.PodClique, podsOf map[types.UID][]corev1.Pod) []*grovev1alpha1.PodClique {
	var out []*grovev1alpha1.PodClique
	for _, c := range cliques {
		if CliqueSucceeded(c) {
			continue
		}
		last, _ := gang.Marker(c.Annotations)
		if gang.CliqueAvailability(gang.CliqueInput{Clique: c, Pods: podsOf[c.UID], Training: true, Last: last}).Breached() {
			out = append(out, c)
		}
	}
	return out
}

// inFlight returns the restart number a replica is in the middle of, 0 if
// none: the highest restart named by a marker that is not done.
func inFlight(cliques []*grovev1alpha1.PodClique) int32 {
	var n int32
	for _, c := range cliques {
		if m, err := gang.ActiveMarker(c.Annotations); err == nil && m != nil {
			n = max(n, m.Restart)
		}
	}
	return n
}

// highestMarker returns the highest restart number any marker of the
// replica names, done or not, 0 if none.
func highestMarker(cliques []*grovev1alpha1.PodClique) int32 {
	var n int32
	for _, c := range cliques {
		if m, err := gang.Marker(c.Annotations); err == nil && m != nil {
			n = max(n, m.Restart)
		}
	}
	return n
}

// allSucceeded reports whether every PodClique the set should have exists and
// has Succeeded. The expected count comes from the template: replicas × (the
// standalone cliques + each PCSG's replicas × its cliques).
func allSucceeded(pcs *grovev1alpha1.PodCliqueSet, cliques []*grovev1alpha1.PodClique) bool {
	if len(cliques) == 0 {
		return false
	}
	for _, c := range cliques {
		if !CliqueSucceeded(c) {
			return false
		}
	}
	return len(cliques) >= expectedCliques(pcs)
}

func expectedCliques(pcs *grovev1alpha1.PodCliqueSet) int {
	t := pcs.Spec.Template
	inGroup := map[string]bool{}
	perReplica := 0
	for _, g := range t.PodCliqueScalingGroupConfigs {
		r := 1
		if g.Replicas != nil {
			r = int(*g.Replicas)
		}
		perReplica += r * len(g.CliqueNames)
		for _, n := range g.CliqueNames {
			inGroup[n] = true
		}
	}
	for _, c := range t.Cliques {
		if c != nil && !inGroup[c.Name] {
			perReplica++
		}
	}
	return int(pcs.Spec.Replicas) * perReplica
}

func podsByOwner(pods []corev1.Pod) map[types.UID][]corev1.Pod {
	out := map[types.UID][]corev1.Pod{}
	for _, p := range pods {
		if ref := metav1.GetControllerOf(&p); ref != nil {
			out[ref.UID] = append(out[ref.UID], p)
		}
	}
	return out
}

func livePods(pods []corev1.Pod) []PodRef {
	var out []PodRef
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, PodRef{Name: p.Name, UID: p.UID})
		}
	}
	return out
}

// Apply returns a copy of pcs carrying s: the phase, restartCount and
// startTime where the served schema keeps them (grove.SetTrainingStatus),
// and the conditions.
func (s Status) Apply(pcs *grovev1alpha1.PodCliqueSet, schemas knob.FieldSchemas) *grovev1alpha1.PodCliqueSet {
	out := pcs.DeepCopy()
	grove.SetTrainingStatus(out, grove.TrainingStatus{Phase: s.Phase, RestartCount: s.RestartCount, StartTime: s.StartTime}, schemas)
	out.Status.Conditions = s.Conditions
	return out
}
