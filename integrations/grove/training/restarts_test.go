package training

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

// outcome is the part of a Decision the issue 19 cases compare.
type outcome struct {
	Phase     shepherdv1alpha1.Phase
	Count     int32
	Start     *time.Time
	Failure   string
	Events    []string // reason, or reason/clique
	Marks     []string // clique:restart:pods[:failed]
	Deletes   []string
	Finishes  []string
	Requeue   time.Duration
	Restarted int32
}

func terminatingPod(p corev1.Pod) corev1.Pod {
	p.DeletionTimestamp = &metav1.Time{Time: t0.Add(-time.Hour)}
	p.Finalizers = []string{"kubernetes"}
	return p
}

func startedAt(p corev1.Pod, t time.Time) corev1.Pod {
	p.Status.StartTime = &metav1.Time{Time: t}
	return p
}

// foreignPod is a pod with the set's part-of label, controlled by a
// PodClique of a deleted set of the same name (another UID).
func foreignPod(name string, s podState) corev1.Pod {
	p := mkPod(0, 0, s)
	p.Name, p.UID = name, types.UID("old-"+name)
	p.Labels = map[string]string{api.LabelPartOf: "pcs"}
	p.OwnerReferences = controller(api.KindPodClique, "pcs-0-w", "old-c0")
	return p
}

// Issue 19, defects 1, 3, 5 and 8: each case failed before its fix.
func TestDecideIssue19(t *testing.T) {
	started := t0.Add(-30 * time.Minute)
	marker := func(restart int32, failed bool, pods ...types.UID) *gang.RestartMarker {
		return &gang.RestartMarker{Restart: restart, Pods: pods, Failed: failed}
	}
	all4 := []string{"pcs-0-w-0", "pcs-0-w-1", "pcs-1-w-0", "pcs-1-w-1"}
	tests := []struct {
		name        string
		maxRestarts int32
		maxRuntime  *time.Duration
		phase       shepherdv1alpha1.Phase
		count       int32
		cliques     []cliqueState
		pods        []corev1.Pod
		want        outcome
	}{
		// Defect 1.
		{name: "defect 1: budget 1, replica 1 marked for restart 1, replica 0 breaches too: Failed",
			maxRestarts: 1, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{wasAvail: true}, {marker: marker(1, true, "p10", "p11")}},
			pods:    pods(failed, ready, failed, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseFailed, Count: 1, Start: &started, Failure: api.ReasonMaxRestartsExceeded, Restarted: 1,
				Events:  []string{"PodCliqueFailed/pcs-1-w", "ReplicaRestarting", "PodCliqueFailed/pcs-0-w", "MaxRestartsExceeded"},
				Deletes: []string{"pcs-1-w-0", "pcs-1-w-1"}, Requeue: ownerGrace}},
		{name: "defect 1: budget 2, replica 1 marked for restart 1 (not committed), replica 0 breaches: restart 2",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{wasAvail: true}, {marker: marker(1, true, "p10", "p11")}},
			pods:    pods(failed, ready, failed, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 2, Start: &started, Restarted: 2,
				Events: []string{"PodCliqueFailed/pcs-1-w", "ReplicaRestarting", "PodCliqueFailed/pcs-0-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-0-w:2:[p00 p01]:failed"}, Deletes: all4,
				Finishes: []string{"pcs-0-w:2:[p00 p01]:failed:done", "pcs-1-w:1:[p10 p11]:failed:done"}}},
		{name: "defect 1: a committed restart whose marker is done still numbers the next one after it",
			maxRestarts: 3, phase: shepherdv1alpha1.PhaseRunning, count: 2,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true, marker: &gang.RestartMarker{Restart: 2, Done: true}}},
			pods:    pods(failed, ready, ready, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 3, Start: &started, Restarted: 1,
				Events: []string{"PodCliqueFailed/pcs-0-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-0-w:3:[p00 p01]:failed"}, Deletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
				Finishes: []string{"pcs-0-w:3:[p00 p01]:failed:done"}}},
		// Defect 8 (events): a deferred replica emits nothing; each
		// PodCliqueFailed comes once, with the commit of its restart.
		{name: "defect 8: two breaches at once: one restart at a time, each PodCliqueFailed once with its commit",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}},
			pods:    pods(failed, ready, failed, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 2, Start: &started, Restarted: 2,
				Events: []string{"PodCliqueFailed/pcs-0-w", "ReplicaRestarting", "PodCliqueFailed/pcs-1-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-0-w:1:[p00 p01]:failed", "pcs-1-w:2:[p10 p11]:failed"}, Deletes: all4,
				Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done", "pcs-1-w:2:[p10 p11]:failed:done"}}},
		{name: "defect 8: the next pass commits restart 1 with its PodCliqueFailed and marks the deferred one",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{marker: marker(1, true, "p00", "p01")}, {wasAvail: true}},
			pods:    pods(failed, ready, failed, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 2, Start: &started, Restarted: 2,
				Events: []string{"PodCliqueFailed/pcs-0-w", "ReplicaRestarting", "PodCliqueFailed/pcs-1-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-1-w:2:[p10 p11]:failed"}, Deletes: all4,
				Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done", "pcs-1-w:2:[p10 p11]:failed:done"}}},
		{name: "defect 8: restart 1 committed, its pods still there: no event again",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning, count: 1,
			cliques: []cliqueState{{marker: marker(1, true, "p00", "p01")}, {wasAvail: true}},
			pods:    pods(failed, ready, ready, ready),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &started,
				Deletes: []string{"pcs-0-w-0", "pcs-0-w-1"}, Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done"}}},
		// Defect 3.
		{name: "defect 3: every replaced pod terminating (lost node): the restart is done",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning, count: 1,
			cliques: []cliqueState{{marker: marker(1, true, "p00", "p01")}, {wasAvail: true}},
			pods:    []corev1.Pod{terminatingPod(mkPod(0, 0, ready)), terminatingPod(mkPod(0, 1, failed)), mkPod(1, 0, ready), mkPod(1, 1, ready)},
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &started,
				Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done"}}},
		{name: "defect 3: one replaced pod not yet deleted: delete it, the restart goes on",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning, count: 1,
			cliques: []cliqueState{{marker: marker(1, true, "p00", "p01")}, {wasAvail: true}},
			pods:    []corev1.Pod{terminatingPod(mkPod(0, 0, ready)), mkPod(0, 1, failed), mkPod(1, 0, ready), mkPod(1, 1, ready)},
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &started,
				Deletes: []string{"pcs-0-w-1"}, Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done"}}},
		{name: "defect 3: done while a replaced pod lingers in Terminating: a new breach is seen again",
			maxRestarts: 2, phase: shepherdv1alpha1.PhaseRunning, count: 1,
			cliques: []cliqueState{{wasAvail: true, marker: &gang.RestartMarker{Restart: 1, Done: true}}, {wasAvail: true}},
			pods: []corev1.Pod{terminatingPod(mkPod(0, 0, ready)), {ObjectMeta: metav1.ObjectMeta{Name: "pcs-0-w-new", UID: "pn",
				OwnerReferences: controller(api.KindPodClique, "pcs-0-w", "c0")}}, mkPod(1, 0, ready), mkPod(1, 1, ready)},
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 2, Start: &started, Restarted: 1,
				Events: []string{"PodCliqueFailed/pcs-0-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-0-w:2:[p00 pn]:failed"}, Deletes: []string{"pcs-0-w-new"},
				Finishes: []string{"pcs-0-w:2:[p00 pn]:failed:done"}}},
		// Defect 9a: a clique whose pods fail before it was ever available
		// uses the restart budget, or fails the set, as any breach does.
		{name: "defect 9a: never available, a pod failed, budget 1: restart 1",
			maxRestarts: 1, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{}, {}},
			pods:    pods(failed, running, running, running),
			want: outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &started, Restarted: 1,
				Events: []string{"PodCliqueFailed/pcs-0-w", "ReplicaRestarting"},
				Marks:  []string{"pcs-0-w:1:[p00 p01]:failed"}, Deletes: []string{"pcs-0-w-0", "pcs-0-w-1"},
				Finishes: []string{"pcs-0-w:1:[p00 p01]:failed:done"}}},
		{name: "defect 9a: never available, a pod failed, budget 0: Failed",
			maxRestarts: 0, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{}, {}},
			pods:    pods(running, running, pending, failed),
			want: outcome{Phase: shepherdv1alpha1.PhaseFailed, Start: &started, Failure: api.ReasonMaxRestartsExceeded,
				Events: []string{"PodCliqueFailed/pcs-1-w", "MaxRestartsExceeded"}, Requeue: ownerGrace}},
		{name: "defect 9a: after a restart the failed pods it replaced no longer count",
			maxRestarts: 1, phase: shepherdv1alpha1.PhaseRunning, count: 1,
			cliques: []cliqueState{{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}, Done: true}}, {}},
			pods:    []corev1.Pod{terminatingPod(mkPod(0, 0, failed)), mkPod(1, 0, running), mkPod(1, 1, running)},
			want:    outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &started}},
		// Defect 5.
		{name: "defect 5: first seen 2h after the pods started, maxRuntime 1h: Failed at once",
			maxRestarts: 3, maxRuntime: ptr.To(time.Hour), phase: shepherdv1alpha1.PhasePending,
			cliques: []cliqueState{{}, {}},
			pods: []corev1.Pod{startedAt(mkPod(0, 0, running), t0.Add(-2*time.Hour)), startedAt(mkPod(0, 1, running), t0.Add(-90*time.Minute)),
				startedAt(mkPod(1, 0, running), t0.Add(-2*time.Hour+time.Minute)), mkPod(1, 1, pending)},
			want: outcome{Phase: shepherdv1alpha1.PhaseFailed, Start: ptr.To(t0.Add(-2 * time.Hour)), Failure: api.ReasonMaxRuntimeExceeded,
				Events: []string{"MaxRuntimeExceeded"}, Requeue: ownerGrace}},
		{name: "defect 5: startTime is the earliest pod start, within maxRuntime",
			maxRestarts: 3, maxRuntime: ptr.To(time.Hour), phase: shepherdv1alpha1.PhasePending,
			cliques: []cliqueState{{}, {}},
			pods:    []corev1.Pod{startedAt(mkPod(0, 0, running), t0.Add(-20*time.Minute)), mkPod(0, 1, running), mkPod(1, 0, pending), mkPod(1, 1, pending)},
			want:    outcome{Phase: shepherdv1alpha1.PhaseRunning, Start: ptr.To(t0.Add(-20 * time.Minute)), Requeue: 40 * time.Minute}},
		// Defect 8 (ownership).
		{name: "defect 8: pods of a deleted set of the same name do not start the new one",
			maxRestarts: 1, phase: shepherdv1alpha1.PhasePending,
			cliques: []cliqueState{{}, {}},
			pods:    append(allPods(pending), startedAt(foreignPod("old-0", running), t0.Add(-3*time.Hour))),
			want:    outcome{Phase: shepherdv1alpha1.PhasePending}},
		{name: "defect 8: a Failed set deletes only the pods it owns",
			maxRestarts: 0, phase: shepherdv1alpha1.PhaseFailed,
			cliques: []cliqueState{{}, {}},
			pods:    []corev1.Pod{mkPod(1, 0, ready), foreignPod("old-0", ready)},
			want:    outcome{Phase: shepherdv1alpha1.PhaseFailed, Start: &started, Deletes: []string{"pcs-1-w-0"}}},
		{name: "defect 8: a breach of a foreign pod is no breach of the set",
			maxRestarts: 0, phase: shepherdv1alpha1.PhaseRunning,
			cliques: []cliqueState{{wasAvail: true}, {wasAvail: true}},
			pods:    append(allPods(ready), foreignPod("old-0", failed)),
			want:    outcome{Phase: shepherdv1alpha1.PhaseRunning, Start: &started}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := set(tc.maxRestarts, tc.maxRuntime, nil)
			st := grove.TrainingStatus{Phase: tc.phase, RestartCount: tc.count}
			if tc.phase != shepherdv1alpha1.PhasePending {
				st.StartTime = &metav1.Time{Time: started}
			}
			if tc.phase == shepherdv1alpha1.PhaseFailed {
				pcs.Status.Conditions = []metav1.Condition{{Type: api.ConditionFailed, Status: metav1.ConditionTrue, Reason: api.ReasonMaxRestartsExceeded}}
			}
			var cliques []grove.Clique
			for i, s := range tc.cliques {
				cliques = append(cliques, mkClique(i, s))
			}
			// A PodClique of the deleted set, still there (garbage
			// collection is asynchronous).
			old := mkClique(0, cliqueState{wasAvail: true}, func(c *grovev1alpha1.PodClique) {
				c.Name, c.UID, c.OwnerReferences = "pcs-0-w", "old-c0", controller(api.KindPodCliqueSet, "pcs", "old-set")
			})
			cliques = append(cliques, old)
			got := runOutcome(t, withStatus(pcs, st), cliques, tc.pods)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

// Crash point: between marking two PodCliques of a replica. The next
// reconcile marks the rest with the same number (failed where the clique is
// breached), commits the restart once, and emits its events once.
func TestRestartResumesAfterPartialMarking(t *testing.T) {
	pcs := withStatus(set(2, nil, nil), grove.TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, StartTime: &metav1.Time{Time: t0}})
	a := mkClique(0, cliqueState{marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"p00", "p01"}}})
	b := mkClique(0, cliqueState{wasAvail: true}, named("pcs-0-v", "cv"))
	bp := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pcs-0-v-0", UID: "pv", OwnerReferences: controller(api.KindPodClique, "pcs-0-v", "cv")}}
	in := input(t, pcs, []grove.Clique{a, b, mkClique(1, cliqueState{wasAvail: true})},
		[]corev1.Pod{mkPod(0, 0, ready), mkPod(0, 1, ready), bp, mkPod(1, 0, ready), mkPod(1, 1, ready)})
	got := runOutcome(t, in.Set, in.Cliques, in.Pods)
	want := outcome{Phase: shepherdv1alpha1.PhaseRunning, Count: 1, Start: &t0, Restarted: 1,
		Events: []string{"PodCliqueFailed/pcs-0-v", "ReplicaRestarting"},
		Marks:  []string{"pcs-0-v:1:[pv]:failed"}, Deletes: []string{"pcs-0-v-0", "pcs-0-w-0", "pcs-0-w-1"},
		Finishes: []string{"pcs-0-w:1:[p00 p01]:done", "pcs-0-v:1:[pv]:failed:done"}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
}
