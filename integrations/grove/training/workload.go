package training

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

// Input is what the PodCliqueSet decision reads.
type Input struct {
	Set *grove.Set
	// State is what shepherd keeps about the set: its WorkloadRecord's
	// (StateOf), or, before the set has one, what an earlier shepherd
	// kept on the objects (Upgrade).
	State State
	// Unrecorded: the set has no record yet; the first write creates it,
	// even when nothing else changes.
	Unrecorded bool
	// MaxRestarts and MaxRuntime are the set's trainingSpec as read
	// (grove.TrainingLimits); MaxRestarts unset is 0 (D-PCS-4).
	MaxRestarts int32
	MaxRuntime  *time.Duration
	// Cliques are the candidate PodCliques (by Grove's part-of label) that
	// are not being deleted; Decide keeps those the set controls.
	Cliques []grove.Clique
	// Groups are the candidate PodCliqueScalingGroups; those the set
	// controls own PodCliques of the set.
	Groups []grove.ScalingGroup
	// Pods are the candidate pods (by label); Decide keeps those a kept
	// PodClique controls.
	Pods []corev1.Pod
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
	// WriteStatus: the record (Decision.State) committing a phase, a
	// startTime, a restart count or a failure — then Decision.Events and
	// the metrics.
	WriteStatus
	// WriteMarker: the record (Decision.State) with one PodClique's
	// restart marker (Decision.Mark).
	WriteMarker
	// WriteCliques: the record (Decision.State) with the PodCliques'
	// wasAvailable and Succeeded as the pods say; also the first write
	// of a set without a record.
	WriteCliques
	// WriteDelete: delete pods (Decision.Delete), with UID preconditions.
	WriteDelete
	// WriteScale: scale PodCliques to 0 replicas (Decision.Scale), the way
	// an autoscaler does, so that Grove removes their pods and creates
	// none: the end of a failed set.
	WriteScale
)

func (w Write) String() string {
	switch w {
	case WriteNone:
		return "None"
	case WriteStatus:
		return "Status"
	case WriteMarker:
		return "Marker"
	case WriteCliques:
		return "Cliques"
	case WriteDelete:
		return "Delete"
	case WriteScale:
		return "Scale"
	}
	return "Unknown"
}

// Mark is a restart marker of a PodClique, written to the set's record.
type Mark struct {
	Clique string
	Marker gang.RestartMarker
}

// Decision is what one reconcile of a Training set does: at most one write
// (Write says which; the other write fields are empty), then — only once a
// status write has landed — Events and the metrics.
type Decision struct {
	Write Write
	// State is the record to write (WriteStatus, WriteMarker,
	// WriteCliques), guarded by the resourceVersion of the record read.
	State State
	// Mark is the marker the State adds (WriteMarker).
	Mark Mark
	// Delete are the pods to delete (WriteDelete).
	Delete []PodRef
	// Scale are the PodCliques to scale to 0 (WriteScale).
	Scale []PodRef
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
// and the record as read and the clock, the next write — the first that
// applies of:
//
//  0. the PodCliques' wasAvailable and Succeeded as their pods say (and
//     the record of a set that has none): the record;
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
// Everything it needs is in the objects and the record, so a reconcile
// after a crash between any two writes decides the write that was next.
func Decide(clk clock.PassiveClock, in Input) Decision {
	now := clk.Now()
	cur := in.State.clone()
	switch cur.Phase {
	case shepherdv1alpha1.PhaseSucceeded:
		if in.Unrecorded {
			return Decision{Write: WriteCliques, State: cur}
		}
		return Decision{}
	case shepherdv1alpha1.PhaseFailed:
		return decideFailed(in, cur, now)
	}
	v := view(in)

	// 0. What each PodClique's pods say: availability and success.
	if next := v.cliqueStates(); in.Unrecorded || !next.equal(cur) {
		return Decision{Write: WriteCliques, State: next, RequeueAfter: restartingPoll}
	}
	next := cur.clone()
	v.progress(&next, now)

	// 1. Final phases. Success is checked before maxRuntime: a set that
	// finished in time but is reconciled after the limit (shepherd was
	// down, or the other controller wrote Succeeded a moment late)
	// succeeded; its pods' exits say so.
	if v.allSucceeded() {
		next.Phase = shepherdv1alpha1.PhaseSucceeded
		return Decision{Write: WriteStatus, State: next, Events: []Event{{Type: corev1.EventTypeNormal, Reason: api.EventWorkloadSucceeded,
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
		if c := r.unmarked(v); c != nil {
			return v.mark(c, r.n, v.breached(c), restartingPoll)
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
			if m := v.last(c); m != nil && m.Restart == r.n && m.Failed {
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
		return Decision{Write: WriteStatus, State: next, Events: events, Restarts: next.RestartCount - cur.RestartCount, RequeueAfter: time.Duration(wait)}
	}

	// 4. The pods the restarts in flight replace. A pod already
	// terminating (deletionTimestamp set) is as good as gone: on a lost
	// node it may stay Terminating for ever, and the restart must not wait
	// for it. It counts for nothing (not ready, not succeeded) meanwhile.
	var victims []PodRef
	for _, r := range inflight {
		victims = append(victims, r.condemned(v)...)
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
			return v.mark(v.byReplica[idx][0], numbered+1, slices.Contains(breached, v.byReplica[idx][0]), time.Duration(wait))
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
		if c := r.through(v); c != nil {
			// The done marker keeps the pods it replaced: they never
			// count again, even lingering in Terminating.
			done := *v.active(c)
			done.Done = true
			e := v.in.State.clique(c)
			e.Marker = &done
			return Decision{Write: WriteMarker, State: v.in.State.withClique(c.Name, e), Mark: Mark{Clique: c.Name, Marker: done},
				RequeueAfter: time.Duration(wait)}
		}
	}
	return Decision{RequeueAfter: time.Duration(wait)}
}

// ownerGrace is how long a failed set's pods may outlive the scale-down of
// their PodCliques before shepherd deletes them itself: Grove removes the
// pods of a PodClique scaled to 0 in its next reconcile, so only pods no
// controller looks after (no Grove running) are still there after it.
const ownerGrace = 15 * time.Second

// decideFailed keeps a Failed set final: the Failed condition present (an
// upgraded record may lack it), then every PodClique of the set scaled to 0
// replicas — through the owner, as an autoscaler would: Grove keeps an
// existing PodClique's replicas when it syncs the set's template, so its
// PodClique controller deletes the pods and creates no new ones, where pods
// deleted by shepherd would be recreated at once — and, once ownerGrace has
// passed since the failure with pods still there, those pods deleted.
func decideFailed(in Input, cur State, now time.Time) Decision {
	failed := meta.FindStatusCondition(cur.Conditions, api.ConditionFailed)
	if failed == nil {
		reason, msg := api.ReasonMaxRestartsExceeded, fmt.Sprintf("the restart budget is used up (%d of maxRestarts %d)", cur.RestartCount, in.MaxRestarts)
		if in.MaxRuntime != nil && cur.StartTime != nil && now.Sub(cur.StartTime.Time) > *in.MaxRuntime {
			reason, msg = api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s", *in.MaxRuntime)
		}
		next := cur.clone()
		next.Conditions = gang.SetCondition(cur.Conditions, metav1.Condition{
			Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
		}, now)
		return Decision{Write: WriteStatus, State: next}
	}
	if in.Unrecorded {
		return Decision{Write: WriteCliques, State: cur}
	}
	cliques, pods := owned(in)
	var scale []PodRef
	for _, c := range cliques {
		if c.Spec.Replicas > 0 {
			scale = append(scale, PodRef{Name: c.Name, UID: c.UID})
		}
	}
	if len(scale) > 0 {
		return Decision{Write: WriteScale, Scale: scale, RequeueAfter: ownerGrace}
	}
	victims := livePods(pods)
	if len(victims) == 0 {
		return Decision{}
	}
	if left := failed.LastTransitionTime.Add(ownerGrace).Sub(now); left > 0 {
		return Decision{RequeueAfter: left}
	}
	return Decision{Write: WriteDelete, Delete: victims, RequeueAfter: ownerGrace}
}

// fail is the status write of a failure: phase Failed and the Failed
// condition, with the events (the pods go in the reconciles after it, see
// decideFailed).
func fail(in Input, next State, events []Event, reason, msg, event string, now time.Time) Decision {
	next.Phase = shepherdv1alpha1.PhaseFailed
	next.Conditions = gang.SetCondition(next.Conditions, metav1.Condition{
		Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
	}, now)
	events = append(events, Event{Type: corev1.EventTypeWarning, Reason: event, Note: msg + "; terminating all pods"})
	return Decision{Write: WriteStatus, State: next, Events: events, Failure: reason}
}

// setView is what Decide reads of a set, by ownership (see owned).
type setView struct {
	in        Input
	cliques   []*grove.Clique
	pods      []corev1.Pod
	podsOf    map[types.UID][]corev1.Pod
	byReplica map[int32][]*grove.Clique
	// replicas are the replica indices, ascending.
	replicas []int32
}

func view(in Input) *setView {
	v := &setView{in: in, byReplica: map[int32][]*grove.Clique{}}
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
func (v *setView) progress(s *State, now time.Time) {
	started := slices.ContainsFunc(v.pods, func(p corev1.Pod) bool { return gang.PodStarted(&p) })
	if s.Phase == "" || s.Phase == shepherdv1alpha1.PhasePending {
		s.Phase = shepherdv1alpha1.PhasePending
		if started {
			s.Phase = shepherdv1alpha1.PhaseRunning
		}
	}
	if s.Phase == shepherdv1alpha1.PhaseRunning && s.StartTime == nil {
		t := metav1.NewTime(firstStart(v.pods, now))
		s.StartTime = &t
	}
}

func (v *setView) allSucceeded() bool {
	if len(v.cliques) == 0 {
		return false
	}
	for _, c := range v.cliques {
		if !v.succeeded(c) {
			return false
		}
	}
	return len(v.cliques) >= expectedCliques(v.in.Set)
}

// restart is one replica's restart in flight: restart n, the highest
// active marker of the replica.
type restart struct {
	idx     int32
	n       int32
	cliques []*grove.Clique
}

// last is c's last restart marker, done or not (nil: none).
func (v *setView) last(c *grove.Clique) *gang.RestartMarker {
	return v.in.State.clique(c).Marker
}

// active is c's restart marker while the restart is in flight (nil: none,
// or done).
func (v *setView) active(c *grove.Clique) *gang.RestartMarker {
	if m := v.last(c); m != nil && !m.Done {
		return m
	}
	return nil
}

func (v *setView) wasAvailable(c *grove.Clique) bool {
	return v.in.State.clique(c).WasAvailable
}
func (v *setView) succeeded(c *grove.Clique) bool { return v.in.State.clique(c).Succeeded }

// cliqueStates is the state with each PodClique's wasAvailable and
// Succeeded as its pods say (DecideClique).
func (v *setView) cliqueStates() State {
	next := v.in.State.clone()
	for _, c := range v.cliques {
		e := v.in.State.clique(c)
		e.UID = c.UID
		e.WasAvailable, e.Succeeded = DecideClique(c, v.podsOf[c.UID], e)
		next.Cliques[c.Name] = e
	}
	return next
}

// inFlight lists the replicas with a restart in flight, by index.
func (v *setView) inFlight() []restart {
	var out []restart
	for _, idx := range v.replicas {
		var n int32
		for _, c := range v.byReplica[idx] {
			if m := v.active(c); m != nil {
				n = max(n, m.Restart)
			}
		}
		if n > 0 {
			out = append(out, restart{idx: idx, n: n, cliques: v.byReplica[idx]})
		}
	}
	return out
}

// unmarked is the first PodClique of the replica not yet marked for the
// restart (stopped between marking two PodCliques; none of its pods was
// deleted yet), nil when every one is.
func (r restart) unmarked(v *setView) *grove.Clique {
	for _, c := range r.cliques {
		if m := v.last(c); m == nil || m.Restart < r.n {
			return c
		}
	}
	return nil
}

// condemned lists the pods the restart replaces that are not yet being
// deleted.
func (r restart) condemned(v *setView) []PodRef {
	var out []PodRef
	for _, c := range r.cliques {
		m := v.active(c)
		if m == nil || m.Restart != r.n {
			continue
		}
		for _, p := range v.podsOf[c.UID] {
			if m.Condemned(p.UID) && p.DeletionTimestamp == nil {
				out = append(out, PodRef{Name: p.Name, UID: p.UID})
			}
		}
	}
	return out
}

// through is the first PodClique whose restart is over — its replaced pods
// gone or terminating, and its wasAvailable reset (held false while the
// marker is active) — nil when none is.
func (r restart) through(v *setView) *grove.Clique {
	for _, c := range r.cliques {
		m := v.active(c)
		if m == nil || m.Restart != r.n || v.wasAvailable(c) {
			continue
		}
		left := slices.ContainsFunc(v.podsOf[c.UID], func(p corev1.Pod) bool { return m.Condemned(p.UID) && p.DeletionTimestamp == nil })
		if !left {
			return c
		}
	}
	return nil
}

// mark is the write of restart n's marker for a PodClique: the restart
// number, the UIDs of its pods now, and failed when its breach caused the
// restart.
func (v *setView) mark(c *grove.Clique, n int32, failed bool, requeue time.Duration) Decision {
	m := gang.RestartMarker{Restart: n, Failed: failed}
	for _, p := range v.podsOf[c.UID] {
		m.Pods = append(m.Pods, p.UID)
	}
	e := v.in.State.clique(c)
	e.UID, e.Marker = c.UID, &m
	return Decision{Write: WriteMarker, State: v.in.State.withClique(c.Name, e), Mark: Mark{Clique: c.Name, Marker: m}, RequeueAfter: requeue}
}

func (v *setView) breached(c *grove.Clique) bool {
	return len(v.breachedCliques([]*grove.Clique{c})) > 0
}

func (v *setView) breachedOf(idx int32) []*grove.Clique {
	return v.breachedCliques(v.byReplica[idx])
}

// highestMarker is the highest restart number any marker of the set names,
// done or not.
func (v *setView) highestMarker() int32 {
	var n int32
	for _, c := range v.cliques {
		if m := v.last(c); m != nil {
			n = max(n, m.Restart)
		}
	}
	return n
}

// breachedCliques returns the breached PodCliques among cliques, read from
// their pods (gang.CliqueAvailability: below minAvailable after having been
// available) — not from MinAvailableBreached, which Grove may be the one to
// write, with its own rules and its own terminationDelay. A Training breach
// is acted on at once (delay 0, see the package doc). A clique that has
// Succeeded is done, not breached.
func (v *setView) breachedCliques(cliques []*grove.Clique) []*grove.Clique {
	var out []*grove.Clique
	for _, c := range cliques {
		if v.succeeded(c) {
			continue
		}
		was := v.wasAvailable(c)
		if gang.CliqueAvailability(gang.CliqueInput{Clique: c, Pods: v.podsOf[c.UID], Training: true, Last: v.last(c), WasAvailable: &was}).Breached() {
			out = append(out, c)
		}
	}
	return out
}

// owned returns the set's PodCliques and pods by controller ownership: a
// PodClique controlled by the set or by a PCSG the set controls, a pod
// controlled by one of those PodCliques.
func owned(in Input) ([]*grove.Clique, []corev1.Pod) {
	owners := map[types.UID]bool{in.Set.UID: true}
	for i := range in.Groups {
		if controlledBy(&in.Groups[i], in.Set.UID) {
			owners[in.Groups[i].UID] = true
		}
	}
	var cliques []*grove.Clique
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

func expectedCliques(pcs *grove.Set) int {
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
