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

// Mark is a restart marker to put on a PodClique.
type Mark struct {
	Clique string
	Marker gang.RestartMarker
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

// Decision is everything one reconcile of a Training set does, in order:
// Marks, then Status (the commit), then Events and metrics, then DeletePods,
// then Finishes.
type Decision struct {
	Status Status
	Marks  []Mark
	// Restarts is how many restarts Status commits (for the metric).
	Restarts int32
	// Failure is the reason of a failure Status commits, "" for none.
	Failure    string
	Events     []Event
	DeletePods []PodRef
	// Finishes are the done markers of PodCliques whose restart is over.
	Finishes []Mark
	// RequeueAfter is when to look again; zero means only on change.
	RequeueAfter time.Duration
}

// restartingPoll is how often a replica with a restart in flight is looked
// at besides the watch events that normally finish it.
const restartingPoll = time.Second

// Decide runs the Training lifecycle of one PodCliqueSet.
func Decide(clk clock.PassiveClock, in Input) Decision {
	now := clk.Now()
	pcs := in.Set
	d := Decision{Status: Status{
		Phase: in.Status.Phase, RestartCount: in.Status.RestartCount,
		StartTime: in.Status.StartTime, Conditions: pcs.Status.Conditions,
	}}
	switch d.Status.Phase {
	case grovev1alpha1.PhaseSucceeded:
		return d
	case grovev1alpha1.PhaseFailed:
		// Final: keep the set's pods terminated, and the Failed condition
		// present. On Grove's schema the phase (a carrier) is committed
		// before the condition, and Grove rewrites its atomic conditions
		// list without a lock; a condition lost either way is put back
		// with the reason the durable state still shows.
		if meta.FindStatusCondition(d.Status.Conditions, api.ConditionFailed) == nil {
			reason, msg := api.ReasonMaxRestartsExceeded, fmt.Sprintf("the restart budget is used up (%d of maxRestarts %d)", d.Status.RestartCount, in.MaxRestarts)
			if in.MaxRuntime != nil && d.Status.StartTime != nil && now.Sub(d.Status.StartTime.Time) > *in.MaxRuntime {
				reason, msg = api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s", *in.MaxRuntime)
			}
			d.Status.Conditions = gang.SetCondition(d.Status.Conditions, metav1.Condition{
				Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: pcs.Generation,
			}, now)
		}
		_, pods := owned(in)
		d.DeletePods = livePods(pods)
		return d
	}

	// Ownership, not labels, decides what belongs to the set (Grove's
	// part-of label is only how the controller finds candidates): a
	// PodClique controlled by the set or by one of its PCSGs, a pod
	// controlled by one of those PodCliques. Objects of a deleted set of the
	// same name neither count nor are deleted.
	cliques, setPods := owned(in)

	// Pending → Running, startTime once: when the set's pods started (their
	// own status.startTime), not when shepherd noticed.
	started := slices.ContainsFunc(setPods, func(p corev1.Pod) bool { return gang.PodStarted(&p) })
	if d.Status.Phase == "" || d.Status.Phase == grovev1alpha1.PhasePending {
		d.Status.Phase = grovev1alpha1.PhasePending
		if started {
			d.Status.Phase = grovev1alpha1.PhaseRunning
		}
	}
	if d.Status.Phase == grovev1alpha1.PhaseRunning && d.Status.StartTime == nil {
		t := metav1.NewTime(firstStart(setPods, now))
		d.Status.StartTime = &t
	}
	var wait gang.MinRequeue

	// Succeeded: every expected PodClique has Succeeded. Checked before
	// maxRuntime: a set that finished in time but is reconciled after the
	// limit (shepherd was down, or the other controller wrote Succeeded a
	// moment late) succeeded; its pods' exits say so.
	if allSucceeded(in.Set, cliques) {
		d.Status.Phase = grovev1alpha1.PhaseSucceeded
		d.Events = append(d.Events, Event{Type: corev1.EventTypeNormal, Reason: api.EventWorkloadSucceeded,
			Note: fmt.Sprintf("all %d PodCliques succeeded after %d restarts", len(cliques), d.Status.RestartCount)})
		return d
	}

	// maxRuntime, from the first start, restarts included.
	if in.MaxRuntime != nil && d.Status.StartTime != nil {
		left := d.Status.StartTime.Add(*in.MaxRuntime).Sub(now)
		if left < 0 {
			d.fail(in, setPods, api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s (started %s)",
				*in.MaxRuntime, d.Status.StartTime.UTC().Format(time.RFC3339)), api.EventMaxRuntimeExceeded, now)
			return d
		}
		wait.Add(left)
	}

	byReplica := map[int32][]*grovev1alpha1.PodClique{}
	for _, c := range cliques {
		if idx := gang.PCSReplicaIndex(c.Labels); idx >= 0 {
			byReplica[idx] = append(byReplica[idx], c)
		}
	}
	podsOf := podsByOwner(setPods)
	replicas := make([]int32, 0, len(byReplica))
	for idx := range byReplica {
		replicas = append(replicas, idx)
	}
	slices.Sort(replicas)

	// Restarts in flight first, in every replica: they are decided (their
	// markers are written) and are committed before a new breach is
	// numbered, so a new restart is numbered after all of them.
	numbered := d.Status.RestartCount
	for _, idx := range replicas {
		numbered = max(numbered, highestMarker(byReplica[idx]))
		if n := inFlight(byReplica[idx]); n > 0 {
			d.continueRestart(idx, n, byReplica[idx], podsOf, in.MaxRestarts)
			wait.Add(restartingPoll)
		}
	}

	restartedNow := false
	for _, idx := range replicas {
		cliques := byReplica[idx]
		if inFlight(cliques) > 0 {
			continue
		}
		breached := breachedCliques(cliques, podsOf)
		if len(breached) == 0 {
			continue
		}
		if restartedNow {
			// One restart per reconcile keeps the commit a single step; the
			// next reconcile takes this replica. Its PodCliqueFailed event
			// comes with the restart (or the failure) it leads to.
			wait.Add(restartingPoll)
			continue
		}
		if numbered < in.MaxRestarts {
			numbered++
			d.startRestart(numbered, cliques, breached, podsOf)
			restartedNow = true
			wait.Add(restartingPoll)
			continue
		}
		for _, c := range breached {
			d.Events = append(d.Events, cliqueFailed(c.Name, idx, 0))
		}
		d.fail(in, setPods, api.ReasonMaxRestartsExceeded, fmt.Sprintf("replica %d failed and the restart budget is used up (%d of maxRestarts %d)",
			idx, numbered, in.MaxRestarts), api.EventMaxRestartsExceeded, now)
		return d
	}
	d.RequeueAfter = time.Duration(wait)
	return d
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

// fail commits phase Failed with the Failed condition and terminates every
// pod the set owns.
func (d *Decision) fail(in Input, pods []corev1.Pod, reason, msg, event string, now time.Time) {
	d.Status.Phase = grovev1alpha1.PhaseFailed
	d.Status.Conditions = gang.SetCondition(d.Status.Conditions, metav1.Condition{
		Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
	}, now)
	d.Failure = reason
	d.Events = append(d.Events, Event{Type: corev1.EventTypeWarning, Reason: event, Note: msg + "; terminating all pods"})
	d.DeletePods = livePods(pods)
	d.Marks, d.Finishes = nil, nil
	d.RequeueAfter = 0
}

// startRestart begins restart number n of a replica by marking its
// PodCliques (the breached ones with Failed), and only that: the count is
// committed, the events emitted and the pods deleted by continueRestart in a
// later reconcile, one that sees the markers in its cache. Committing in the
// same reconcile would let a following reconcile whose PodClique cache has
// not caught up with the markers take the same breach for a new one and
// count it twice.
func (d *Decision) startRestart(n int32, cliques, breached []*grovev1alpha1.PodClique, podsOf map[types.UID][]corev1.Pod) {
	for _, c := range cliques {
		m := gang.RestartMarker{Restart: n, Failed: slices.Contains(breached, c)}
		for _, p := range podsOf[c.UID] {
			m.Pods = append(m.Pods, p.UID)
		}
		d.Marks = append(d.Marks, Mark{Clique: c.Name, Marker: m})
	}
}

// commitRestart counts restart n, once: the commit is an optimistic-lock
// write of the count, and the events (ReplicaRestarting, and PodCliqueFailed
// for the cliques whose marker says they caused it) are emitted only after
// it succeeds.
func (d *Decision) commitRestart(idx, n, budget int32, failed []string) {
	if d.Status.RestartCount >= n {
		return
	}
	d.Restarts += n - d.Status.RestartCount
	d.Status.RestartCount = n
	for _, c := range failed {
		d.Events = append(d.Events, cliqueFailed(c, idx, n))
	}
	d.Events = append(d.Events, Event{Type: corev1.EventTypeNormal, Reason: api.EventReplicaRestarting,
		Note: fmt.Sprintf("restarting replica %d: restart %d of maxRestarts %d", idx, n, budget)})
}

// continueRestart finishes restart n of a replica (see the package doc).
func (d *Decision) continueRestart(idx, n int32, cliques []*grovev1alpha1.PodClique, podsOf map[types.UID][]corev1.Pod, budget int32) {
	var failed []string
	for _, c := range cliques {
		m, _ := gang.Marker(c.Annotations)
		switch {
		case m == nil || m.Restart < n:
			// Stopped between marking two cliques: mark this one now (none
			// of its pods was deleted yet); its pods go next round.
			nm := gang.RestartMarker{Restart: n, Failed: len(breachedCliques([]*grovev1alpha1.PodClique{c}, podsOf)) > 0}
			for _, p := range podsOf[c.UID] {
				nm.Pods = append(nm.Pods, p.UID)
			}
			d.Marks = append(d.Marks, Mark{Clique: c.Name, Marker: nm})
			if nm.Failed {
				failed = append(failed, c.Name)
			}
		case m.Done:
			// This clique is through restart n; its pods are the new ones.
		default:
			if m.Failed {
				failed = append(failed, c.Name)
			}
			// A condemned pod already terminating (deletionTimestamp set)
			// is as good as gone: on a lost node it may stay Terminating
			// for ever, and the restart must not wait for it. It counts
			// for nothing (not ready, not succeeded) while it lingers.
			left := false
			for _, p := range podsOf[c.UID] {
				if m.Condemned(p.UID) && p.DeletionTimestamp == nil {
					left = true
					d.DeletePods = append(d.DeletePods, PodRef{Name: p.Name, UID: p.UID})
				}
			}
			if !left && !grove.WasAvailable(c) {
				d.Finishes = append(d.Finishes, Mark{Clique: c.Name, Marker: gang.RestartMarker{Restart: n, Done: true}})
			}
		}
	}
	// The decision to restart was made when the markers were written; a
	// crash before the commit only delays it.
	d.commitRestart(idx, n, budget, failed)
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
		if gang.CliqueAvailability(gang.CliqueInput{Clique: c, Pods: podsOf[c.UID], Training: true}).Breached() {
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
