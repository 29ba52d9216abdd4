package training

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const setUID = types.UID("pcs-uid")

// controller is a controller ownerReference.
func controller(kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "grove.io/v1alpha1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

// set is a Training PodCliqueSet with 2 replicas of one clique "w" of 2 pods,
// its workloadType and trainingSpec in their carriers (Grove's schema).
func set(maxRestarts int32, maxRuntime *time.Duration, delay *time.Duration) *grovev1alpha1.PodCliqueSet {
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs", Namespace: "ns", UID: setUID}}
	pcs.Spec.Replicas = 2
	pcs.Annotations = map[string]string{api.AnnotationWorkloadType: grove.WorkloadTypeTraining, api.AnnotationMaxRestarts: fmt.Sprint(maxRestarts)}
	if maxRuntime != nil {
		pcs.Annotations[api.AnnotationMaxRuntime] = maxRuntime.String()
	}
	if delay != nil {
		pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: *delay}
	}
	pcs.Spec.Template.Cliques = []*grovev1alpha1.PodCliqueTemplateSpec{{Name: "w", Spec: grovev1alpha1.PodCliqueSpec{Replicas: 2}}}
	return pcs
}

// withStatus is pcs as served with the Training status an earlier shepherd
// kept on it, in its carriers (Grove's schema): what Upgrade reads.
func withStatus(pcs *grovev1alpha1.PodCliqueSet, st grove.TrainingStatus) *grove.Set {
	s := grove.SetOf(pcs)
	grove.SetTrainingStatus(s, st, nil)
	return s
}

type cliqueState struct {
	// breachCond is a MinAvailableBreached=True condition someone (gang or
	// Grove) wrote; Decide does not read it.
	breachCond bool
	succeeded  bool
	wasAvail   bool
	// wasCarrier keeps wasAvailable in its carrier annotation (Grove's
	// schema) instead of the seed field.
	wasCarrier bool
	marker     *gang.RestartMarker
}

// mkClique is replica idx's clique "w" as served, after edits (of its
// published fields; the served form is taken last).
func mkClique(idx int, s cliqueState, edits ...func(*grovev1alpha1.PodClique)) grove.Clique {
	c := grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pcs-%d-w", idx), UID: types.UID(fmt.Sprintf("c%d", idx)),
		Labels: map[string]string{api.LabelPartOf: "pcs", api.LabelPodCliqueSetReplicaIndex: fmt.Sprint(idx)}, Annotations: map[string]string{},
		OwnerReferences: controller(api.KindPodCliqueSet, "pcs", setUID)},
		Spec: grovev1alpha1.PodCliqueSpec{Replicas: 2}}
	if s.wasAvail && s.wasCarrier {
		c.Annotations[api.AnnotationWasAvailable] = "true"
	}
	if s.breachCond {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: api.ConditionMinAvailableBreached, Status: metav1.ConditionTrue,
			Reason: api.ReasonInsufficientReadyPods, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))})
	}
	if s.succeeded {
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: api.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: api.ReasonAllPodsSucceeded})
	}
	if s.marker != nil {
		c.Annotations[api.AnnotationRestart] = s.marker.String()
	}
	for _, edit := range edits {
		edit(&c)
	}
	served := grove.CliqueOf(&c)
	if s.wasAvail && !s.wasCarrier {
		// The seed's status field, on a cluster serving the seed schema.
		if err := unstructured.SetNestedField(served.Served.Object, true, "status", "wasAvailable"); err != nil {
			panic(err)
		}
	}
	return served
}

type podState int

const (
	pending podState = iota
	running          // started, not (yet) Ready
	ready
	failed // exited 1
)

// mkPod is pod k of replica idx's clique.
func mkPod(idx, k int, s podState) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pcs-%d-w-%d", idx, k), UID: types.UID(fmt.Sprintf("p%d%d", idx, k)),
		OwnerReferences: controller(api.KindPodClique, fmt.Sprintf("pcs-%d-w", idx), types.UID(fmt.Sprintf("c%d", idx)))}}
	switch s {
	case running:
		p.Status.Phase = corev1.PodRunning
	case ready:
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	case failed:
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	}
	return p
}

// pods are both replicas' pods: replica 0's two states, then replica 1's.
func pods(r0a, r0b, r1a, r1b podState) []corev1.Pod {
	return []corev1.Pod{mkPod(0, 0, r0a), mkPod(0, 1, r0b), mkPod(1, 0, r1a), mkPod(1, 1, r1b)}
}

func allPods(s podState) []corev1.Pod { return pods(s, s, s, s) }

// input is Decide's input for a set as the controller reads it.
func input(t *testing.T, pcs *grove.Set, cliques []grove.Clique, ps []corev1.Pod) Input {
	t.Helper()
	// The state as an earlier shepherd kept it on the objects: the
	// upgrade path reads it (Upgrade), as the controller does for a set
	// without a record.
	maxRestarts, maxRuntime, err := grove.TrainingLimits(pcs)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Set: pcs, MaxRuntime: maxRuntime, Cliques: cliques, Pods: ps}
	if in.State, err = Upgrade(in); err != nil {
		t.Fatal(err)
	}
	if maxRestarts != nil {
		in.MaxRestarts = *maxRestarts
	}
	return in
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
	started := metav1.NewTime(t0.Add(-30 * time.Minute))
	// restarted are the events of one restart's commit.
	restarted := []string{api.EventPodCliqueFailed, api.EventReplicaRestarting}
	tests := []struct {
		name    string
		pcs     *grovev1alpha1.PodCliqueSet
		phase   shepherdv1alpha1.Phase
		start   *metav1.Time
		count   int32
		failed  string        // an existing Failed condition's reason
		cliques []cliqueState // index = replica
		pods    []corev1.Pod

		wantPhase   shepherdv1alpha1.Phase
		wantStart   *time.Time
		wantCount   int32
		wantFailed  string
		wantEvents  []string
		wantDeletes []string
		wantMarks   []string
		wantMarkN   int32 // restart number of the marks
		wantFinish  []string
		// wantScaled are the PodCliques a failure scales to 0.
		wantScaled  []string
		wantRequeue time.Duration
	}{
		{name: "nothing started: Pending", pcs: set(0, nil, nil), cliques: []cliqueState{{}, {}}, pods: allPods(pending),
			wantPhase: shepherdv1alpha1.PhasePending},
		{name: "a pod started: Running, startTime now", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhasePending, cliques: []cliqueState{{}, {}},
			pods: pods(running, pending, pending, pending), wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &t0},
		{name: "startTime is never reset", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 1,
			cliques: []cliqueState{{}, {}}, pods: allPods(pending), wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1},
		{name: "maxRuntime not yet: requeue at the limit", pcs: set(0, &hour, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(running), wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantRequeue: 30 * time.Minute},
		{name: "maxRuntime exactly reached: not exceeded, look again in 1s", pcs: set(0, ptr.To(30*time.Minute), nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(running), wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantRequeue: time.Second},
		{name: "maxRuntime exceeded: Failed, every PodClique scaled to 0", pcs: set(3, ptr.To(29*time.Minute), nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(running), wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time,
			wantFailed: api.ReasonMaxRuntimeExceeded, wantEvents: []string{api.EventMaxRuntimeExceeded},
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantRequeue: ownerGrace},
		{name: "maxRuntime by its carrier", pcs: carriers(set(3, nil, nil), "", "29m"), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: allPods(running), wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time,
			wantFailed: api.ReasonMaxRuntimeExceeded, wantEvents: []string{api.EventMaxRuntimeExceeded},
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantRequeue: ownerGrace},
		{name: "every clique succeeded: Succeeded", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true}, {succeeded: true}}, wantPhase: shepherdv1alpha1.PhaseSucceeded, wantStart: &started.Time,
			wantEvents: []string{api.EventWorkloadSucceeded}},
		// Issue 19, defect 4: reconciled after maxRuntime (shepherd was
		// down), a set whose every clique succeeded in time succeeded.
		{name: "succeeded, seen after maxRuntime: Succeeded, not Failed", pcs: set(0, ptr.To(29*time.Minute), nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true}, {succeeded: true}}, wantPhase: shepherdv1alpha1.PhaseSucceeded, wantStart: &started.Time,
			wantEvents: []string{api.EventWorkloadSucceeded}},
		{name: "a clique not yet created: not Succeeded", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true}}, wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "healthy: nothing", pcs: set(1, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: allPods(ready), wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "breach with maxRestarts 0: Failed at once", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(ready, failed, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantFailed: api.ReasonMaxRestartsExceeded,
			wantEvents: []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded},
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantRequeue: ownerGrace},
		{name: "breach within budget: that replica marked for restart 1, then counted, then its pods deleted", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(ready, ready, ready, failed),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1,
			wantEvents: restarted, wantDeletes: []string{"pcs-1-w-0", "pcs-1-w-1"},
			wantMarks: []string{"pcs-1-w"}, wantMarkN: 1, wantFinish: []string{"pcs-1-w"}},
		{name: "a lost pod is a breach too", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(ready, pending, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1,
			wantEvents: restarted, wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
			wantMarks: []string{"pcs-0-w"}, wantMarkN: 1, wantFinish: []string{"pcs-0-w"}},
		{name: "budget used up: Failed", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 2,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(failed, ready, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantCount: 2, wantFailed: api.ReasonMaxRestartsExceeded,
			wantEvents: []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded},
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantRequeue: ownerGrace},
		{name: "budget by its carrier", pcs: carriers(set(0, nil, nil), "2", ""), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 2,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(failed, ready, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantCount: 2, wantFailed: api.ReasonMaxRestartsExceeded,
			wantEvents: []string{api.EventPodCliqueFailed, api.EventMaxRestartsExceeded},
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantRequeue: ownerGrace},
		{name: "terminationDelay 4h (Grove's default): acted on at once", pcs: set(2, nil, ptr.To(4*time.Hour)), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}}, pods: pods(failed, ready, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1,
			wantEvents: restarted, wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
			wantMarks: []string{"pcs-0-w"}, wantMarkN: 1, wantFinish: []string{"pcs-0-w"}},
		{name: "wasAvailable by its carrier", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true, wasCarrier: true}, {}}, pods: pods(failed, ready, pending, pending),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1,
			wantEvents: restarted, wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
			wantMarks: []string{"pcs-0-w"}, wantMarkN: 1, wantFinish: []string{"pcs-0-w"}},
		{name: "a MinAvailableBreached condition the pods do not show is no breach", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{wasAvail: true, breachCond: true}, {wasAvail: true}}, pods: allPods(ready),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "a starting clique (never available) is not breached", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{}, {}}, pods: pods(ready, running, pending, pending),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "a succeeded clique's breach is no failure", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques: []cliqueState{{succeeded: true, wasAvail: true}, {}}, pods: pods(failed, failed, running, running),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time},
		{name: "restart in flight: delete what is left, no second count", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(0, 1, ready), mkPod(1, 0, ready), mkPod(1, 1, ready)},
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantDeletes: []string{"pcs-0-w-1"}, wantFinish: []string{"pcs-0-w"}},
		{name: "restart in flight, pods gone: wasAvailable reset first, then the marker done", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(1, 0, ready), mkPod(1, 1, ready)},
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantFinish: []string{"pcs-0-w"}},
		{name: "restart done: the marker becomes done", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 1,
			cliques:   []cliqueState{{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      []corev1.Pod{mkPod(1, 0, ready), mkPod(1, 1, ready)},
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantFinish: []string{"pcs-0-w"}},
		{name: "a done marker is history: a new breach restarts again", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started, count: 1,
			cliques: []cliqueState{{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Done: true}}, {wasAvail: true}}, pods: pods(ready, failed, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 2,
			wantEvents: restarted, wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
			wantMarks: []string{"pcs-0-w"}, wantMarkN: 2, wantFinish: []string{"pcs-0-w"}},
		{name: "marked replica seen: commit the count, delete its pods", pcs: set(2, nil, nil), phase: shepherdv1alpha1.PhaseRunning, start: &started,
			cliques:   []cliqueState{{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}}, {}},
			pods:      pods(ready, failed, running, running),
			wantPhase: shepherdv1alpha1.PhaseRunning, wantStart: &started.Time, wantCount: 1, wantEvents: []string{api.EventReplicaRestarting},
			wantDeletes: []string{"pcs-0-w-0", "pcs-0-w-1"}, wantFinish: []string{"pcs-0-w"}},
		{name: "Succeeded is final", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseSucceeded, start: &started,
			cliques: []cliqueState{{wasAvail: true}, {}}, pods: pods(failed, ready, ready, ready),
			wantPhase: shepherdv1alpha1.PhaseSucceeded, wantStart: &started.Time},
		{name: "Failed is final: its PodCliques scaled to 0, pods nobody removed past the grace deleted", pcs: set(5, nil, nil), phase: shepherdv1alpha1.PhaseFailed, start: &started, failed: api.ReasonMaxRestartsExceeded,
			cliques: []cliqueState{{wasAvail: true}, {}}, pods: []corev1.Pod{mkPod(1, 1, ready)},
			wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantFailed: api.ReasonMaxRestartsExceeded,
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}, wantDeletes: []string{"pcs-1-w-1"}},
		{name: "Failed phase without its condition (lost): put back, budget", pcs: set(0, nil, nil), phase: shepherdv1alpha1.PhaseFailed, start: &started,
			cliques: []cliqueState{{}, {}}, wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantFailed: api.ReasonMaxRestartsExceeded,
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}},
		{name: "Failed phase without its condition (lost): put back, runtime", pcs: set(3, ptr.To(time.Minute), nil), phase: shepherdv1alpha1.PhaseFailed, start: &started,
			cliques: []cliqueState{{}, {}}, wantPhase: shepherdv1alpha1.PhaseFailed, wantStart: &started.Time, wantFailed: api.ReasonMaxRuntimeExceeded,
			wantScaled: []string{"pcs-0-w", "pcs-1-w"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := tc.pcs
			if tc.failed != "" {
				pcs.Status.Conditions = []metav1.Condition{{Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: tc.failed}}
			}
			var cliques []grove.Clique
			for i, s := range tc.cliques {
				cliques = append(cliques, mkClique(i, s))
			}
			w := newWorld(t, withStatus(pcs, grove.TrainingStatus{Phase: tc.phase, StartTime: tc.start, RestartCount: tc.count}), cliques, tc.pods)
			tr := w.run()
			o := w.outcome(tr)
			if o.Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q", o.Phase, tc.wantPhase)
			}
			if (o.Start == nil) != (tc.wantStart == nil) || (tc.wantStart != nil && !o.Start.Equal(*tc.wantStart)) {
				t.Errorf("startTime = %v, want %v", o.Start, tc.wantStart)
			}
			if o.Count != tc.wantCount {
				t.Errorf("restartCount = %d, want %d", o.Count, tc.wantCount)
			}
			if o.Restarted != tc.wantCount-tc.count {
				t.Errorf("restarts counted = %d, want %d", o.Restarted, tc.wantCount-tc.count)
			}
			failed := meta.FindStatusCondition(w.input().State.Conditions, api.ConditionFailed)
			if tc.wantFailed == "" && failed != nil {
				t.Errorf("unexpected Failed condition %+v", failed)
			}
			if tc.wantFailed != "" && (failed == nil || failed.Status != metav1.ConditionTrue || failed.Reason != tc.wantFailed) {
				t.Errorf("Failed condition = %+v, want True/%s", failed, tc.wantFailed)
			}
			// The failure metric counts the failure once: when it is
			// committed, never for a set already Failed.
			if want := tc.wantFailed; tc.phase == shepherdv1alpha1.PhaseFailed {
				want = ""
				if o.Failure != want {
					t.Errorf("failure = %q, want %q", o.Failure, want)
				}
			} else if o.Failure != want {
				t.Errorf("failure = %q, want %q", o.Failure, want)
			}
			var evs []string
			for _, st := range tr {
				evs = append(evs, reasons(st.d.Events)...)
			}
			if !slices.Equal(evs, tc.wantEvents) {
				t.Errorf("events = %v, want %v", evs, tc.wantEvents)
			}
			if !slices.Equal(o.Deletes, tc.wantDeletes) {
				t.Errorf("deleted pods = %v, want %v", o.Deletes, tc.wantDeletes)
			}
			var scaled []string
			for _, st := range tr {
				for _, c := range st.d.Scale {
					scaled = append(scaled, c.Name)
				}
			}
			if !slices.Equal(scaled, tc.wantScaled) {
				t.Errorf("scaled to 0 = %v, want %v", scaled, tc.wantScaled)
			}
			var marks, finished []string
			for _, st := range tr {
				if st.d.Write != WriteMarker {
					continue
				}
				m := st.d.Mark
				if m.Marker.Done {
					finished = append(finished, m.Clique)
					if m.Marker.Restart != tc.wantCount || len(m.Marker.Pods) != 2 {
						t.Errorf("finish marker of %s = %+v, want done restart %d keeping the 2 pods it replaced", m.Clique, m.Marker, tc.wantCount)
					}
					continue
				}
				marks = append(marks, m.Clique)
				if m.Marker.Restart != tc.wantMarkN || len(m.Marker.Pods) != 2 {
					t.Errorf("marker of %s = %+v, want active restart %d naming its 2 pods", m.Clique, m.Marker, tc.wantMarkN)
				}
			}
			if !slices.Equal(marks, tc.wantMarks) {
				t.Errorf("marks = %v, want %v", marks, tc.wantMarks)
			}
			if !slices.Equal(finished, tc.wantFinish) {
				t.Errorf("finished = %v, want %v", finished, tc.wantFinish)
			}
			if o.Requeue != tc.wantRequeue {
				t.Errorf("requeueAfter = %v, want %v (writes:%s)", o.Requeue, tc.wantRequeue, tr)
			}
		})
	}
}

func TestReplicaRestartingEventHasTheCount(t *testing.T) {
	pcs := withStatus(set(3, nil, nil), grove.TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, RestartCount: 1})
	marked := mkClique(0, cliqueState{wasAvail: true, marker: &gang.RestartMarker{Restart: 2, Pods: []types.UID{"p00", "p01"}}})
	tr := newWorld(t, pcs, []grove.Clique{marked}, allPods(ready)).run()
	var evs []Event
	for _, st := range tr {
		evs = append(evs, st.d.Events...)
	}
	for _, e := range evs {
		if e.Reason == api.EventReplicaRestarting {
			if !strings.Contains(e.Note, "restart 2 of maxRestarts 3") {
				t.Errorf("ReplicaRestarting note %q does not give the count", e.Note)
			}
			return
		}
	}
	t.Fatalf("no ReplicaRestarting event in %v", reasons(evs))
}

// fieldSchemas is a served schema that has the given field paths.
type fieldSchemas []string

func (f fieldSchemas) HasField(_ schema.GroupKind, path []string) bool {
	return slices.Contains(f, strings.Join(path, "."))
}

// A State survives its record: what Decide decides is what the next
// reconcile reads, and the record is the set's, controlled by it.
func TestStateRecordRoundTrip(t *testing.T) {
	started := metav1.NewTime(t0)
	st := State{Phase: shepherdv1alpha1.PhaseFailed, RestartCount: 2, StartTime: &started,
		Conditions: []metav1.Condition{{Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: api.ReasonMaxRestartsExceeded, Message: "used up"}},
		Cliques: map[string]CliqueState{
			"pcs-0-w": {UID: "c0", WasAvailable: true, Marker: &gang.RestartMarker{Restart: 2, Pods: []types.UID{"p1"}, Failed: true}},
			"pcs-1-w": {UID: "c1", Succeeded: true, WasAvailable: true},
		}}
	rec := st.Record(grove.SetOf(set(2, nil, nil)))
	if rec.Name != "podcliqueset-pcs" || rec.Spec.WorkloadRef.UID != setUID || len(rec.OwnerReferences) != 1 || rec.OwnerReferences[0].UID != setUID {
		t.Errorf("record %s of %+v owned by %+v: want podcliqueset-pcs of the set", rec.Name, rec.Spec.WorkloadRef, rec.OwnerReferences)
	}
	if rec.Status.Reason != api.ReasonMaxRestartsExceeded || rec.Status.Phase != "Failed" || *rec.Status.RestartCount != 2 {
		t.Errorf("record status %+v: want phase Failed, reason MaxRestartsExceeded, 2 restarts", rec.Status)
	}
	if diff := cmp.Diff(st, StateOf(rec)); diff != "" {
		t.Errorf("StateOf(Record) (-want +got):\n%s", diff)
	}
}

// An earlier shepherd's state on the objects — Grove's carriers on the set,
// was-available and restart markers on the PodCliques — is carried over
// whole, so an upgrade in the middle of a restart loses nothing.
func TestUpgradeFromAnnotations(t *testing.T) {
	started := metav1.NewTime(t0)
	pcs := grove.SetOf(set(2, nil, nil))
	grove.SetTrainingStatus(pcs, grove.TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, RestartCount: 1, StartTime: &started}, fieldSchemas{})
	marker := &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00"}, Failed: true}
	cliques := []grove.Clique{mkClique(0, cliqueState{marker: marker}), mkClique(1, cliqueState{wasAvail: true, wasCarrier: true})}
	got, err := Upgrade(Input{Set: pcs, Cliques: cliques})
	if err != nil {
		t.Fatal(err)
	}
	want := State{Phase: shepherdv1alpha1.PhaseRunning, RestartCount: 1, StartTime: &started, Cliques: map[string]CliqueState{
		"pcs-0-w": {UID: "c0", Marker: marker},
		"pcs-1-w": {UID: "c1", WasAvailable: true},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Upgrade (-want +got):\n%s", diff)
	}
	pcs.Annotations[api.AnnotationRestartCount] = "two"
	if _, err := Upgrade(Input{Set: grove.SetOf(&pcs.PodCliqueSet), Cliques: cliques}); err == nil || !strings.Contains(err.Error(), api.AnnotationRestartCount) {
		t.Errorf("a carrier that does not parse: error %v, want one naming %s", err, api.AnnotationRestartCount)
	}
}

// Within one replica, a PodClique through restart n keeps its new pods while
// another PodClique of the replica is still restarting.
func TestRestartDoneCliqueLeftAlone(t *testing.T) {
	pcs := withStatus(set(2, nil, nil), grove.TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, RestartCount: 1})
	a := mkClique(0, cliqueState{marker: &gang.RestartMarker{Restart: 1, Done: true}})
	b := mkClique(0, cliqueState{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"old"}}}, named("pcs-0-v", "cv"))
	newA := mkPod(0, 0, running) // owned by a, created after the restart
	old := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old-v", UID: "old", OwnerReferences: controller(api.KindPodClique, "pcs-0-v", "cv")}}
	o := runOutcome(t, pcs, []grove.Clique{a, b}, []corev1.Pod{newA, old})
	want := outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: ptr.To(t0),
		Deletes: []string{"old-v"}, Finishes: []string{"pcs-0-v:1:[old]:done"}}
	if diff := cmp.Diff(want, o, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("run (-want +got):\n%s", diff)
	}
}

// named renames a PodClique (mkClique).
func named(name string, uid types.UID) func(*grovev1alpha1.PodClique) {
	return func(c *grovev1alpha1.PodClique) { c.Name, c.UID = name, uid }
}

// carriers gives a set's trainingSpec carriers (Grove's schema) the values
// given, as written ("" keeps a value).
func carriers(pcs *grovev1alpha1.PodCliqueSet, maxRestarts, maxRuntime string) *grovev1alpha1.PodCliqueSet {
	if maxRestarts != "" {
		pcs.Annotations[api.AnnotationMaxRestarts] = maxRestarts
	}
	if maxRuntime != "" {
		pcs.Annotations[api.AnnotationMaxRuntime] = maxRuntime
	}
	return pcs
}
