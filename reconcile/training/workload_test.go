package training

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// set is a Training PodCliqueSet with 2 replicas of one clique "w" of 2 pods.
func set(maxRestarts int32, maxRuntime *time.Duration, delay *time.Duration) *grovev1alpha1.PodCliqueSet {
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs", Namespace: "ns"}}
	pcs.Spec.Replicas = 2
	pcs.Spec.WorkloadType = ptr.To(grovev1alpha1.WorkloadTypeTraining)
	pcs.Spec.TrainingSpec = &grovev1alpha1.TrainingSpec{MaxRestarts: ptr.To(maxRestarts)}
	if maxRuntime != nil {
		pcs.Spec.TrainingSpec.MaxRuntime = &metav1.Duration{Duration: *maxRuntime}
	}
	if delay != nil {
		pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: *delay}
	}
	pcs.Spec.Template.Cliques = []*grovev1alpha1.PodCliqueTemplateSpec{{Name: "w", Spec: grovev1alpha1.PodCliqueSpec{Replicas: 2}}}
	return pcs
}

type cliqueState struct {
	breachedAgo *time.Duration // nil: not breached
	succeeded   bool
	wasAvail    bool
	marker      *gang.RestartMarker
}

func mkClique(idx int, s cliqueState) grovev1alpha1.PodClique {
	c := grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pcs-%d-w", idx), UID: types.UID(fmt.Sprintf("c%d", idx)),
		Labels: map[string]string{api.LabelPartOf: "pcs", api.LabelPodCliqueSetReplicaIndex: fmt.Sprint(idx)}},
		Spec: grovev1alpha1.PodCliqueSpec{Replicas: 2}}
	c.Status.WasAvailable = s.wasAvail
	if s.breachedAgo != nil {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: api.ConditionMinAvailableBreached, Status: metav1.ConditionTrue,
			Reason: api.ReasonInsufficientReadyPods, LastTransitionTime: metav1.NewTime(t0.Add(-*s.breachedAgo))})
	}
	if s.succeeded {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: api.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: api.ReasonAllPodsSucceeded})
	}
	if s.marker != nil {
		c.Annotations = map[string]string{api.AnnotationRestart: s.marker.String()}
	}
	return c
}

// mkPod is pod k of replica idx's clique; running or pending.
func mkPod(idx, k int, started bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pcs-%d-w-%d", idx, k), UID: types.UID(fmt.Sprintf("p%d%d", idx, k)),
		OwnerReferences: []metav1.OwnerReference{{Kind: api.KindPodClique, Name: fmt.Sprintf("pcs-%d-w", idx), UID: types.UID(fmt.Sprintf("c%d", idx))}}}}
	if started {
		p.Status.Phase = corev1.PodRunning
	}
	return p
}

func allPods(started bool) []corev1.Pod {
	return []corev1.Pod{mkPod(0, 0, started), mkPod(0, 1, started), mkPod(1, 0, started), mkPod(1, 1, started)}
}

func reasons(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func podNames(refs []PodRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func TestDecide(t *testing.T) {
	hour := time.Hour
	ago := func(d time.Duration) *time.Duration { return &d }
	started := metav1.NewTime(t0.Add(-30 * time.Minute))
	tests := []struct {
		name    string
		pcs     *grovev1alpha1.PodCliqueSet
		phase   grovev1alpha1.PodCliqueSetPhase
		start   *metav1.Time
		count   int32
		cliques []cliqueState // index = replica
		pods    []corev1.Pod

		wantPhase   grovev1alpha1.PodCliqueSetPhase
		wantStart   *time.Time
		wantCount   int32
		wantFailed  string
		wantEvents  []string
		wantDeletes []string
		wantMarks   []string
		wantMarkN   int32 // restart number of the marks
		wantFinish  []string
		wantRequeue time.Duration
	}{
		{name: "nothing started: Pending", pcs: set(0, nil, nil), cliques: []cliqueState{{}, {}}, pods: allPods(false),
			wantPhase: grovev1alpha1.PhasePending},
		{name: "a pod started: Running, startTime now", pcs: set(0, nil, nil), phase: grovev1alpha1.PhasePending, cliques: []cliqueState{{}, {}},
			pods: append(allPods(false)[1:], mkPod(0, 0, true)), wantPhase: grovev1alpha1.PhaseRunning, wantStart: &t0},
		{name: "startTime is never reset", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 1,
			cliques: []cliqueState{{}, {}}, pods: allPods(false), wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1},
		{name: "maxRuntime not yet: requeue at the limit", pcs: set(0, &hour, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(true), wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantRequeue: 30 * time.Minute},
		{name: "maxRuntime exactly reached: not exceeded, look again in 1s", pcs: set(0, ptr.To(30*time.Minute), nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(true), wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantRequeue: time.Second},
		{name: "maxRuntime exceeded: Failed, every pod terminated", pcs: set(3, ptr.To(29*time.Minute), nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(true), wantPhase: grovev1alpha1.PhaseFailed, wantStart: &started.Time,
			wantFailed: api.ReasonMaxRuntimeExceeded, wantEvents: []string{api.EventMaxRuntimeExceeded},
			wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1", "pcs-1-w-0", "pcs-1-w-1"}},
		{name: "every clique succeeded: Succeeded", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true}, {succeeded: true}}, wantPhase: grovev1alpha1.PhaseSucceeded, wantStart: &started.Time,
			wantEvents: []string{api.EventWorkloadSucceeded}},
		{name: "a clique not yet created: not Succeeded", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true}}, wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "breach with maxRestarts 0: Failed at once", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseFailed, wantStart: &started.Time, wantFailed: api.ReasonMaxRestartsExceeded,
			wantEvents:  []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded},
			wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1", "pcs-1-w-0", "pcs-1-w-1"}},
		{name: "breach within budget: mark that replica for restart 1 (counted and deleted next round)", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {breachedAgo: ago(0), wasAvail: true}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time,
			wantEvents: []string{api.EventPodCliqueFailed}, wantMarks: []string{"pcs-1-w"}, wantMarkN: 1, wantRequeue: time.Second},
		{name: "budget used up: Failed", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 2,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseFailed, wantStart: &started.Time, wantCount: 2, wantFailed: api.ReasonMaxRestartsExceeded,
			wantEvents:  []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded},
			wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1", "pcs-1-w-0", "pcs-1-w-1"}},
		{name: "breach inside the delay: wait for it", pcs: set(2, nil, ptr.To(10*time.Second)), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(4 * time.Second), wasAvail: true}, {breachedAgo: ago(7 * time.Second), wasAvail: true}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantRequeue: 3 * time.Second},
		{name: "breach exactly at the delay: act", pcs: set(2, nil, ptr.To(10*time.Second)), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(10 * time.Second), wasAvail: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time,
			wantEvents: []string{api.EventPodCliqueFailed}, wantMarks: []string{"pcs-0-w"}, wantMarkN: 1, wantRequeue: time.Second},
		{name: "a succeeded clique's breach is no failure", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(0), succeeded: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "restart in flight: delete what is left, no second count", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{breachedAgo: ago(0), wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(0, 1, true), mkPod(1, 0, true), mkPod(1, 1, true)},
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantDeletes: []string{"pcs-0-w-1"}, wantRequeue: time.Second},
		{name: "restart in flight, pods gone but gang has not reset the clique: keep the marker", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{breachedAgo: ago(0), wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(1, 0, true), mkPod(1, 1, true)},
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantRequeue: time.Second},
		{name: "restart done: the marker becomes done", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(1, 0, true), mkPod(1, 1, true)},
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantFinish: []string{"pcs-0-w"}, wantRequeue: time.Second},
		{name: "a done marker is history: a new breach restarts again", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started, count: 1,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Done: true}}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1,
			wantEvents: []string{api.EventPodCliqueFailed}, wantMarks: []string{"pcs-0-w"}, wantMarkN: 2, wantRequeue: time.Second},
		{name: "marked replica seen: commit the count, delete its pods", pcs: set(2, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques:   []cliqueState{{breachedAgo: ago(0), wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantEvents: []string{api.EventReplicaRestarting},
			wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"}, wantRequeue: time.Second},
		{name: "Succeeded is final", pcs: set(0, nil, nil), phase: grovev1alpha1.PhaseSucceeded, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseSucceeded, wantStart: &started.Time},
		{name: "Failed is final: only leftover pods are deleted", pcs: set(5, nil, nil), phase: grovev1alpha1.PhaseFailed, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true}, {}}, pods: []corev1.Pod{mkPod(1, 1, true)},
			wantPhase: grovev1alpha1.PhaseFailed, wantStart: &started.Time, wantDeletes: []string{"pcs-1-w-1"}},
		{name: "delay unset on Training means 0", pcs: set(1, nil, nil), phase: grovev1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{breachedAgo: ago(0), wasAvail: true}, {}}, pods: allPods(true),
			wantPhase: grovev1alpha1.PhaseRunning, wantStart: &started.Time,
			wantEvents: []string{api.EventPodCliqueFailed}, wantMarks: []string{"pcs-0-w"}, wantMarkN: 1, wantRequeue: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := tc.pcs
			pcs.Status.Phase, pcs.Status.StartTime, pcs.Status.RestartCount = tc.phase, tc.start, tc.count
			in := Input{Set: pcs, Pods: tc.pods}
			for i, s := range tc.cliques {
				in.Cliques = append(in.Cliques, mkClique(i, s))
			}
			d := Decide(clocktesting.NewFakePassiveClock(t0), in)
			if d.Status.Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q", d.Status.Phase, tc.wantPhase)
			}
			if (d.Status.StartTime == nil) != (tc.wantStart == nil) || (tc.wantStart != nil && !d.Status.StartTime.Time.Equal(*tc.wantStart)) {
				t.Errorf("startTime = %v, want %v", d.Status.StartTime, tc.wantStart)
			}
			if d.Status.RestartCount != tc.wantCount {
				t.Errorf("restartCount = %d, want %d", d.Status.RestartCount, tc.wantCount)
			}
			if d.Restarts != tc.wantCount-tc.count {
				t.Errorf("restarts counted = %d, want %d", d.Restarts, tc.wantCount-tc.count)
			}
			failed := meta.FindStatusCondition(d.Status.Conditions, api.ConditionFailed)
			if tc.wantFailed == "" && failed != nil {
				t.Errorf("unexpected Failed condition %+v", failed)
			}
			if tc.wantFailed != "" && (failed == nil || failed.Status != metav1.ConditionTrue || failed.Reason != tc.wantFailed || d.Failure != tc.wantFailed) {
				t.Errorf("Failed condition = %+v (failure %q), want True/%s", failed, d.Failure, tc.wantFailed)
			}
			if got := reasons(d.Events); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events = %v, want %v", got, tc.wantEvents)
			}
			if got := podNames(d.DeletePods); !slices.Equal(got, tc.wantDeletes) {
				t.Errorf("deleted pods = %v, want %v", got, tc.wantDeletes)
			}
			var marks []string
			for _, m := range d.Marks {
				marks = append(marks, m.Clique)
				if m.Marker.Restart != tc.wantMarkN || len(m.Marker.Pods) != 2 || m.Marker.Done {
					t.Errorf("marker of %s = %+v, want active restart %d naming its 2 pods", m.Clique, m.Marker, tc.wantMarkN)
				}
			}
			if !slices.Equal(marks, tc.wantMarks) {
				t.Errorf("marks = %v, want %v", marks, tc.wantMarks)
			}
			var finished []string
			for _, m := range d.Finishes {
				finished = append(finished, m.Clique)
				if !m.Marker.Done || m.Marker.Restart != tc.wantCount || len(m.Marker.Pods) != 0 {
					t.Errorf("finish marker of %s = %+v, want done restart %d", m.Clique, m.Marker, tc.wantCount)
				}
			}
			if !slices.Equal(finished, tc.wantFinish) {
				t.Errorf("finished = %v, want %v", finished, tc.wantFinish)
			}
			if d.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter = %v, want %v", d.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

func TestReplicaRestartingEventHasTheCount(t *testing.T) {
	pcs := set(3, nil, nil)
	pcs.Status.Phase, pcs.Status.RestartCount = grovev1alpha1.PhaseRunning, 1
	zero := time.Duration(0)
	marked := mkClique(0, cliqueState{breachedAgo: &zero, wasAvail: true, marker: &gang.RestartMarker{Restart: 2, Pods: []types.UID{"p00", "p01"}}})
	d := Decide(clocktesting.NewFakePassiveClock(t0), Input{Set: pcs, Cliques: []grovev1alpha1.PodClique{marked}, Pods: allPods(true)})
	for _, e := range d.Events {
		if e.Reason == api.EventReplicaRestarting {
			if !strings.Contains(e.Note, "restart 2 of maxRestarts 3") {
				t.Errorf("ReplicaRestarting note %q does not give the count", e.Note)
			}
			return
		}
	}
	t.Fatalf("no ReplicaRestarting event in %v", reasons(d.Events))
}

func TestStatusChanged(t *testing.T) {
	pcs := set(0, nil, nil)
	d := Decide(clocktesting.NewFakePassiveClock(t0), Input{Set: pcs, Pods: allPods(false), Cliques: []grovev1alpha1.PodClique{mkClique(0, cliqueState{})}})
	if !d.Status.Changed(pcs) {
		t.Fatal("a new set gets phase Pending: must be a change")
	}
	pcs.Status.Phase = d.Status.Phase
	if Decide(clocktesting.NewFakePassiveClock(t0), Input{Set: pcs, Pods: allPods(false)}).Status.Changed(pcs) {
		t.Error("the same decision twice reports a change")
	}
}

func TestCliqueDelay(t *testing.T) {
	pcs := set(1, nil, nil)
	standalone := mkClique(0, cliqueState{})
	grouped := mkClique(0, cliqueState{})
	grouped.Labels[api.LabelPodCliqueScalingGroup] = "pcs-0-sg"
	g := grovev1alpha1.PodCliqueScalingGroup{ObjectMeta: metav1.ObjectMeta{Name: "pcs-0-sg", Labels: map[string]string{api.LabelPodCliqueSetReplicaIndex: "0"}}}
	in := Input{Set: pcs, Groups: []grovev1alpha1.PodCliqueScalingGroup{g}}
	if d := cliqueDelay(in, &standalone); d != 0 {
		t.Errorf("unset delay on Training = %v, want 0 (D-PCS-2)", d)
	}
	pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: time.Minute}
	pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "sg", TerminationDelay: &metav1.Duration{Duration: 5 * time.Second}}}
	if d := cliqueDelay(in, &standalone); d != time.Minute {
		t.Errorf("standalone clique delay = %v, want the set's 1m", d)
	}
	if d := cliqueDelay(in, &grouped); d != 5*time.Second {
		t.Errorf("PCSG clique delay = %v, want the PCSG override 5s", d)
	}
}

// Within one replica, a PodClique through restart n keeps its new pods while
// another PodClique of the replica is still restarting.
func TestRestartDoneCliqueLeftAlone(t *testing.T) {
	pcs := set(2, nil, nil)
	pcs.Status.Phase, pcs.Status.RestartCount = grovev1alpha1.PhaseRunning, 1
	a := mkClique(0, cliqueState{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Done: true}})
	b := mkClique(0, cliqueState{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"old"}}})
	b.Name, b.UID = "pcs-0-v", "cv"
	newA := mkPod(0, 0, true) // owned by a, created after the restart
	old := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old-v", UID: "old", OwnerReferences: []metav1.OwnerReference{{Kind: api.KindPodClique, Name: "pcs-0-v", UID: "cv"}}}}
	d := Decide(clocktesting.NewFakePassiveClock(t0), Input{Set: pcs, Cliques: []grovev1alpha1.PodClique{a, b}, Pods: []corev1.Pod{newA, old}})
	if len(d.Marks) != 0 {
		t.Errorf("marks = %+v, want none (a is done, b is marked)", d.Marks)
	}
	if got := podNames(d.DeletePods); !slices.Equal(got, []string{"old-v"}) {
		t.Errorf("deleted = %v, want only b's condemned pod", got)
	}
	if len(d.Finishes) != 0 || d.Status.RestartCount != 1 {
		t.Errorf("finishes %+v, restartCount %d; want none and 1", d.Finishes, d.Status.RestartCount)
	}
}
