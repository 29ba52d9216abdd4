package grove

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// ownedPods lists the pods a PodClique controls (by controller UID, not
// by Grove's labels, which a same-named predecessor's pods share).
func (w *world) ownedPods(clique string) []corev1.Pod {
	w.t.Helper()
	pclq, err := w.getClique(w.ctx, clique)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range w.pods(clique) {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == pclq.UID {
			out = append(out, p)
		}
	}
	return out
}

// markRestart writes a restart marker into a set's record, as shepherd's
// first restart step does.
func (w *world) markRestart(set, clique string, m gang.RestartMarker) {
	w.t.Helper()
	rec := w.record(set)
	if rec == nil {
		w.t.Fatalf("set %s has no record", set)
	}
	i := slices.IndexFunc(rec.Status.Cliques, func(c shepherdv1alpha1.CliqueRecord) bool { return c.Name == clique })
	if i < 0 {
		w.t.Fatalf("the record of %s has no entry for PodClique %s: %+v", set, clique, rec.Status.Cliques)
	}
	rec.Status.Cliques[i].Restart = &shepherdv1alpha1.CliqueRestart{Restart: m.Restart, Pods: m.Pods, Failed: m.Failed, Done: m.Done}
	if err := w.c.Update(w.ctx, rec); err != nil {
		w.t.Fatal(err)
	}
}

// Issue 19, defect 1. Crash point: after replica 1's restart 1 was marked,
// before it was committed. While shepherd is down replica 0 fails too. With
// maxRestarts 1 the second failure is over budget: the set ends
// Failed/MaxRestartsExceeded with restartCount 1 (the marked restart counted
// once), not Running with two restarts numbered 1.
func TestTrainingTwoBreachesBudgetOne(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	first := w.startShepherd()
	spec := setSpec{name: "train", replicas: 2, training: true, maxRestarts: ptr.To[int32](1),
		cliques: []cliqueSpec{{name: "worker", replicas: 2, minAvailable: 2}}}
	w.createSet(spec)
	w.dumpOnFailure("train")
	w.runAll("train")
	first.stop()

	var uids []types.UID
	for _, p := range w.ownedPods("train-1-worker") {
		uids = append(uids, p.UID)
	}
	w.markRestart("train", "train-1-worker", gang.RestartMarker{Restart: 1, Pods: uids, Failed: true})
	p1 := w.ownedPods("train-1-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p1, exited(1))
	p0 := w.ownedPods("train-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p0, exited(1))

	w.startShepherd()
	st, _ := w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	if st.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", st.RestartCount)
	}
	w.waitNoPods("train")
	w.waitEvent(api.EventPodCliqueFailed, "train-0-worker")
	w.waitEvent(api.EventPodCliqueFailed, "train-1-worker")
	if n := len(w.events(api.EventReplicaRestarting)); n != 1 {
		t.Errorf("%d ReplicaRestarting events, want 1", n)
	}
}

// Issue 19, defect 3: a pod the restart deletes stays Terminating (a lost
// node: here a finalizer nobody removes). The restart is done once every
// replaced pod is terminating; the replica's next failure is acted on.
func TestTrainingRestartNotHeldByTerminatingPod(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(trainingSet("train", 2, nil, nil))
	w.dumpOnFailure("train")
	w.runAll("train")

	stuck := w.ownedPods("train-0-worker")[1]
	const finalizer = "test.shepherd.dev/lost-node"
	if err := w.c.Patch(w.ctx, &stuck, rawMerge(fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, finalizer))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.c.Patch(w.ctx, &stuck, rawMerge(`{"metadata":{"finalizers":null}}`)) })
	failing := w.ownedPods("train-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &failing, exited(1))

	w.waitSet("train", "restartCount 1", restarts(1))
	for _, c := range w.cliques("train") {
		w.eventually("PodClique "+c.Name+": restart 1 done in the record", func() (bool, error) {
			m := w.cliqueRecord("train", c.Name).Restart
			return m != nil && m.Restart == 1 && m.Done, nil
		})
	}
	var still corev1.Pod
	if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(&stuck), &still); err != nil || still.DeletionTimestamp == nil {
		t.Fatalf("the stuck pod: %v, deletionTimestamp %v; want it still Terminating", err, still.DeletionTimestamp)
	}

	// Grove recreates the pods; the replica runs again, then fails again.
	for _, c := range w.cliques("train") {
		live := 0
		for _, p := range w.ownedPods(c.Name) {
			if p.DeletionTimestamp == nil {
				live++
			}
		}
		for k := int32(live); k < c.Spec.Replicas; k++ {
			w.createPod(&c.PodClique, k)
		}
	}
	w.runAll("train")
	for _, p := range w.ownedPods("train-0-worker") {
		if p.DeletionTimestamp == nil {
			cluster.SetPodStatus(w.t, w.c, &p, exited(1))
			break
		}
	}
	w.waitSet("train", "restartCount 2", restarts(2))
}

// Issue 19, defect 5 (a restart of shepherd): the pods started 2 h before
// shepherd first sees the set; with maxRuntime 1 h it is already over, and
// startTime is the pods' start, not when shepherd noticed.
func TestTrainingStartTimeFromPods(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.createSet(trainingSet("train", 3, ptr.To(time.Hour), nil))
	w.dumpOnFailure("train")
	podStart := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	for _, c := range w.cliques("train") {
		for _, p := range w.pods(c.Name) {
			cluster.SetPodStatus(w.t, w.c, &p, func(st *corev1.PodStatus) { running(st); st.StartTime = &podStart })
		}
	}
	w.startShepherd()
	st, _ := w.waitSet("train", "Failed/MaxRuntimeExceeded", failedCondition(api.ReasonMaxRuntimeExceeded))
	if st.StartTime == nil || !st.StartTime.Equal(&podStart) {
		t.Errorf("startTime = %v, want the pods' start %v", st.StartTime, podStart)
	}
	w.waitNoPods("train")
}

// Issue 19, defect 8: a set deleted and created again under the same name
// while its old pods linger (garbage collection is asynchronous; this
// control plane has none). The old pods — same labels, controlled by the
// old PodCliques — neither start the new set nor are deleted when it fails.
func TestTrainingRecreatedSetIgnoresOldPods(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	old := w.createSet(trainingSet("train", 0, nil, nil))
	w.runPods("train")
	oldPods := w.setPods("train")
	if err := w.c.Delete(w.ctx, grove.SetOf(old).Served); err != nil {
		t.Fatal(err)
	}
	for _, c := range w.cliques("train") {
		if err := w.c.Delete(w.ctx, c.Served); err != nil {
			t.Fatal(err)
		}
	}
	// The old set's WorkloadRecord, if shepherd has written it, goes as the
	// garbage collector would remove it (the old set controls it): until
	// then no record of the new set can be created (record.Put), and
	// shepherd retries. The old pods stay: they are what the test is about.
	w.eventually("the old set, its PodCliques and its record gone", func() (bool, error) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(api.KindPodCliqueSet + "List"))
		if err := w.c.List(w.ctx, l, client.InNamespace(w.ns)); err != nil {
			return false, err
		}
		if rec := w.record("train"); rec != nil {
			if err := w.c.Delete(w.ctx, rec, client.Preconditions{UID: &rec.UID}); err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
			return false, nil
		}
		return len(l.Items) == 0 && len(w.cliques("train")) == 0, nil
	})

	w.createSet(trainingSet("train", 0, nil, nil))
	w.dumpOnFailure("train")
	w.waitSet("train", "Pending", phase(shepherdv1alpha1.PhasePending))
	w.quiet("the old pods do not start the new set", 2*time.Second, func() error {
		if st := w.status("train"); st.Phase != shepherdv1alpha1.PhasePending || st.StartTime != nil {
			return fmt.Errorf("phase %q, startTime %v; want Pending without one", st.Phase, st.StartTime)
		}
		return nil
	})

	for _, c := range w.cliques("train") {
		for _, p := range w.ownedPods(c.Name) {
			cluster.SetPodStatus(w.t, w.c, &p, running)
		}
	}
	w.waitAvailable("train")
	p := w.ownedPods("train-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p, exited(1))
	w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	w.eventually("the new set's pods deleted", func() (bool, error) {
		return len(w.setPods("train")) == len(oldPods), nil
	})
	for _, op := range oldPods {
		var cur corev1.Pod
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(&op), &cur); err != nil || cur.DeletionTimestamp != nil {
			t.Errorf("old pod %s: %v, deletionTimestamp %v; want it left alone", op.Name, err, cur.DeletionTimestamp)
		}
	}
}

// Issue 19, defect 9a: a worker crashes before its clique was ever
// available (GREP-0285: a failure fails the job — it is no slow start). The
// crash uses the restart budget like any breach; the next crash, with the
// budget used up, fails the set.
func TestTrainingCrashBeforeAvailable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(trainingSet("train", 1, nil, nil))
	w.dumpOnFailure("train")
	// The launcher runs; the workers never become Ready: one crashes.
	for _, p := range w.pods("train-0-launcher") {
		cluster.SetPodStatus(w.t, w.c, &p, running)
	}
	w.failWorker("train")
	w.waitSet("train", "restartCount 1 after a crash before the clique was available", restarts(1))
	w.waitEvent(api.EventReplicaRestarting, "train")
	w.waitEvent(api.EventPodCliqueFailed, "train-0-worker")

	w.regrow("train")
	w.failWorker("train")
	st, _ := w.waitSet("train", "Failed/MaxRestartsExceeded after the second crash", failedCondition(api.ReasonMaxRestartsExceeded))
	if st.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", st.RestartCount)
	}
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRestartsExceeded, "train")
	if n := len(w.events(api.EventReplicaRestarting)); n != 1 {
		t.Errorf("%d ReplicaRestarting events, want 1", n)
	}
}
