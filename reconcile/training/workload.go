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
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// Input is what the PodCliqueSet decision reads.
type Input struct {
	Set *grovev1alpha1.PodCliqueSet
	// Cliques are the set's PodCliques that are not being deleted.
	Cliques []grovev1alpha1.PodClique
	// Groups are the set's PodCliqueScalingGroups (for their delays).
	Groups []grovev1alpha1.PodCliqueScalingGroup
	// Pods are the set's pods, each owned by one of Cliques or left over.
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
		Phase: pcs.Status.Phase, RestartCount: pcs.Status.RestartCount,
		StartTime: pcs.Status.StartTime, Conditions: pcs.Status.Conditions,
	}}
	switch d.Status.Phase {
	case grovev1alpha1.PhaseSucceeded:
		return d
	case grovev1alpha1.PhaseFailed:
		// Final: keep the set's pods terminated.
		d.DeletePods = livePods(in.Pods)
		return d
	}

	// Pending → Running, startTime once.
	started := slices.ContainsFunc(in.Pods, func(p corev1.Pod) bool { return gang.PodStarted(&p) })
	if d.Status.Phase == "" || d.Status.Phase == grovev1alpha1.PhasePending {
		d.Status.Phase = grovev1alpha1.PhasePending
		if started {
			d.Status.Phase = grovev1alpha1.PhaseRunning
		}
	}
	if d.Status.Phase == grovev1alpha1.PhaseRunning && d.Status.StartTime == nil {
		t := metav1.NewTime(now.Truncate(time.Second))
		d.Status.StartTime = &t
	}
	var wait gang.MinRequeue

	// maxRuntime, from the first start, restarts included.
	if ts := pcs.Spec.TrainingSpec; ts != nil && ts.MaxRuntime != nil && d.Status.StartTime != nil {
		left := d.Status.StartTime.Add(ts.MaxRuntime.Duration).Sub(now)
		if left < 0 {
			d.fail(in, api.ReasonMaxRuntimeExceeded, fmt.Sprintf("the workload ran longer than maxRuntime %s (started %s)",
				ts.MaxRuntime.Duration, d.Status.StartTime.UTC().Format(time.RFC3339)), api.EventMaxRuntimeExceeded, now)
			return d
		}
		wait.Add(left)
	}

	// Succeeded: every expected PodClique has Succeeded.
	if allSucceeded(in) {
		d.Status.Phase = grovev1alpha1.PhaseSucceeded
		d.Events = append(d.Events, Event{Type: corev1.EventTypeNormal, Reason: api.EventWorkloadSucceeded,
			Note: fmt.Sprintf("all %d PodCliques succeeded after %d restarts", len(in.Cliques), d.Status.RestartCount)})
		return d
	}

	byReplica := map[int32][]*grovev1alpha1.PodClique{}
	for i := range in.Cliques {
		c := &in.Cliques[i]
		if idx := gang.PCSReplicaIndex(c.Labels); idx >= 0 {
			byReplica[idx] = append(byReplica[idx], c)
		}
	}
	podsOf := podsByOwner(in.Pods)
	replicas := make([]int32, 0, len(byReplica))
	for idx := range byReplica {
		replicas = append(replicas, idx)
	}
	slices.Sort(replicas)

	restartedNow := false
	for _, idx := range replicas {
		cliques := byReplica[idx]
		if n := inFlight(cliques); n > 0 {
			d.continueRestart(idx, n, cliques, podsOf, maxRestarts(pcs))
			wait.Add(restartingPoll)
			continue
		}
		expired, left := d.expiredBreaches(in, cliques, now)
		if len(expired) == 0 {
			if left > 0 {
				wait.Add(left)
			}
			continue
		}
		for _, c := range expired {
			d.Events = append(d.Events, Event{Clique: c.Name, Type: corev1.EventTypeWarning, Reason: api.EventPodCliqueFailed,
				Note: fmt.Sprintf("PodClique %s of replica %d breached MinAvailable", c.Name, idx)})
		}
		if restartedNow {
			// One restart per reconcile keeps the commit a single step; the
			// next reconcile takes this replica.
			wait.Add(restartingPoll)
			continue
		}
		if d.Status.RestartCount < maxRestarts(pcs) {
			d.startRestart(cliques, podsOf)
			restartedNow = true
			wait.Add(restartingPoll)
			continue
		}
		d.fail(in, api.ReasonMaxRestartsExceeded, fmt.Sprintf("replica %d failed and the restart budget is used up (%d of maxRestarts %d)",
			idx, d.Status.RestartCount, maxRestarts(pcs)), api.EventMaxRestartsExceeded, now)
		return d
	}
	d.RequeueAfter = time.Duration(wait)
	return d
}

// fail commits phase Failed with the Failed condition and terminates every pod.
func (d *Decision) fail(in Input, reason, msg, event string, now time.Time) {
	d.Status.Phase = grovev1alpha1.PhaseFailed
	d.Status.Conditions = gang.SetCondition(d.Status.Conditions, metav1.Condition{
		Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: in.Set.Generation,
	}, now)
	d.Failure = reason
	d.Events = append(d.Events, Event{Type: corev1.EventTypeWarning, Reason: event, Note: msg + "; terminating all pods"})
	d.DeletePods = livePods(in.Pods)
	d.Marks, d.Finishes = nil, nil
	d.RequeueAfter = 0
}

// startRestart begins restart number RestartCount+1 of a replica by marking
// its PodCliques, and only that: the count is committed and the pods deleted
// by continueRestart in a later reconcile, one that sees the markers in its
// cache. Committing in the same reconcile would let a following reconcile
// whose PodClique cache has not caught up with the markers take the same
// breach for a new one and count it twice.
func (d *Decision) startRestart(cliques []*grovev1alpha1.PodClique, podsOf map[types.UID][]corev1.Pod) {
	n := d.Status.RestartCount + 1
	for _, c := range cliques {
		m := gang.RestartMarker{Restart: n}
		for _, p := range podsOf[c.UID] {
			m.Pods = append(m.Pods, p.UID)
		}
		d.Marks = append(d.Marks, Mark{Clique: c.Name, Marker: m})
	}
}

func (d *Decision) commitRestart(idx, n, budget int32) {
	if d.Status.RestartCount >= n {
		return
	}
	d.Restarts += n - d.Status.RestartCount
	d.Status.RestartCount = n
	d.Events = append(d.Events, Event{Type: corev1.EventTypeNormal, Reason: api.EventReplicaRestarting,
		Note: fmt.Sprintf("restarting replica %d: restart %d of maxRestarts %d", idx, n, budget)})
}

// continueRestart finishes restart n of a replica (see the package doc).
func (d *Decision) continueRestart(idx, n int32, cliques []*grovev1alpha1.PodClique, podsOf map[types.UID][]corev1.Pod, budget int32) {
	for _, c := range cliques {
		m, _ := gang.Marker(c.Annotations)
		switch {
		case m == nil || m.Restart < n:
			// Stopped between marking two cliques: mark this one now (none
			// of its pods was deleted yet); its pods go next round.
			nm := gang.RestartMarker{Restart: n}
			for _, p := range podsOf[c.UID] {
				nm.Pods = append(nm.Pods, p.UID)
			}
			d.Marks = append(d.Marks, Mark{Clique: c.Name, Marker: nm})
		case m.Done:
			// This clique is through restart n; its pods are the new ones.
		default:
			left := false
			for _, p := range podsOf[c.UID] {
				if m.Condemned(p.UID) {
					left = true
					if p.DeletionTimestamp == nil {
						d.DeletePods = append(d.DeletePods, PodRef{Name: p.Name, UID: p.UID})
					}
				}
			}
			if !left && !c.Status.WasAvailable {
				d.Finishes = append(d.Finishes, Mark{Clique: c.Name, Marker: gang.RestartMarker{Restart: n, Done: true}})
			}
		}
	}
	// The decision to restart was made when the markers were written; a
	// crash before the commit only delays it.
	d.commitRestart(idx, n, budget)
}

// expiredBreaches returns the replica's breached PodCliques past their delay,
// and the shortest wait of those not yet past it (zero if none).
func (d *Decision) expiredBreaches(in Input, cliques []*grovev1alpha1.PodClique, now time.Time) ([]*grovev1alpha1.PodClique, time.Duration) {
	var expired []*grovev1alpha1.PodClique
	var wait gang.MinRequeue
	for _, c := range cliques {
		if CliqueSucceeded(c) {
			continue
		}
		since, ok := gang.CliqueBreachedSince(c)
		if !ok {
			continue
		}
		left := since.Add(cliqueDelay(in, c)).Sub(now)
		if left <= 0 {
			expired = append(expired, c)
		} else {
			wait.Add(left)
		}
	}
	return expired, time.Duration(wait)
}

// cliqueDelay is the terminationDelay that applies to a clique: its PCSG's
// effective delay, else the set's, and 0 when unset (D-PCS-2).
func cliqueDelay(in Input, c *grovev1alpha1.PodClique) time.Duration {
	var base time.Duration
	if d := in.Set.Spec.Template.TerminationDelay; d != nil {
		base = d.Duration
	}
	name := c.Labels[api.LabelPodCliqueScalingGroup]
	if name == "" {
		return base
	}
	for i := range in.Groups {
		if in.Groups[i].Name != name {
			continue
		}
		if d := gang.GroupDelay(in.Set, &in.Groups[i]); d != nil {
			return *d
		}
		if g := in.Groups[i].Spec.TerminationDelay; g != nil {
			return g.Duration
		}
	}
	return base
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

func maxRestarts(pcs *grovev1alpha1.PodCliqueSet) int32 {
	if ts := pcs.Spec.TrainingSpec; ts != nil && ts.MaxRestarts != nil {
		return *ts.MaxRestarts
	}
	return 0
}

// allSucceeded reports whether every PodClique the set should have exists and
// has Succeeded. The expected count comes from the template: replicas × (the
// standalone cliques + each PCSG's replicas × its cliques).
func allSucceeded(in Input) bool {
	if len(in.Cliques) == 0 {
		return false
	}
	for i := range in.Cliques {
		if !CliqueSucceeded(&in.Cliques[i]) {
			return false
		}
	}
	return len(in.Cliques) >= expectedCliques(in.Set)
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
		for _, ref := range p.OwnerReferences {
			if ref.Kind == api.KindPodClique {
				out[ref.UID] = append(out[ref.UID], p)
			}
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

// Changed reports whether s differs from the set's status.
func (s Status) Changed(pcs *grovev1alpha1.PodCliqueSet) bool {
	st := pcs.Status
	if s.Phase != st.Phase || s.RestartCount != st.RestartCount {
		return true
	}
	if (s.StartTime == nil) != (st.StartTime == nil) || (s.StartTime != nil && !s.StartTime.Equal(st.StartTime)) {
		return true
	}
	a := meta.FindStatusCondition(s.Conditions, api.ConditionFailed)
	b := meta.FindStatusCondition(st.Conditions, api.ConditionFailed)
	return (a == nil) != (b == nil) || (a != nil && (a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message))
}
