package grove

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// trainingSet is one replica of a launcher (1 pod) and workers (2 pods).
func trainingSet(name string, maxRestarts int32, maxRuntime, delay *time.Duration) setSpec {
	return setSpec{name: name, replicas: 1, training: true, maxRestarts: &maxRestarts, maxRuntime: maxRuntime, delay: delay,
		cliques: []cliqueSpec{{name: "launcher", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}}}
}

// set is a PodCliqueSet as served (seed fields included).
func (w *world) set(name string) *grove.Set {
	w.t.Helper()
	pcs, err := grove.GetSet(w.ctx, w.c, types.NamespacedName{Namespace: w.ns, Name: name})
	if err != nil {
		w.t.Fatal(err)
	}
	return pcs
}

// record is shepherd's WorkloadRecord of a set (nil: none yet).
func (w *world) record(name string) *shepherdv1alpha1.WorkloadRecord {
	w.t.Helper()
	rec, err := cluster.Record(w.ctx, w.c, w.ns, api.KindPodCliqueSet, name)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// statusOf is a set's Training status as its record holds it.
func statusOf(rec *shepherdv1alpha1.WorkloadRecord) grove.TrainingStatus {
	if rec == nil {
		return grove.TrainingStatus{}
	}
	return grove.TrainingStatus{Phase: rec.Status.Phase, RestartCount: ptr.Deref(rec.Status.RestartCount, 0), StartTime: rec.Status.StartTime}
}

// status is a set's Training status, from its record.
func (w *world) status(name string) grove.TrainingStatus {
	w.t.Helper()
	return statusOf(w.record(name))
}

// waitSet waits until the set's Training status, in its record, satisfies ok.
func (w *world) waitSet(name, what string, ok func(grove.TrainingStatus, *shepherdv1alpha1.WorkloadRecord) bool) (grove.TrainingStatus, *shepherdv1alpha1.WorkloadRecord) {
	w.t.Helper()
	var rec *shepherdv1alpha1.WorkloadRecord
	w.eventually("PodCliqueSet "+name+": "+what, func() (bool, error) {
		var err error
		rec, err = cluster.Record(w.ctx, w.c, w.ns, api.KindPodCliqueSet, name)
		return rec != nil && ok(statusOf(rec), rec), err
	})
	return statusOf(rec), rec
}

func phase(p shepherdv1alpha1.Phase) func(grove.TrainingStatus, *shepherdv1alpha1.WorkloadRecord) bool {
	return func(s grove.TrainingStatus, _ *shepherdv1alpha1.WorkloadRecord) bool { return s.Phase == p }
}

func restarts(n int32) func(grove.TrainingStatus, *shepherdv1alpha1.WorkloadRecord) bool {
	return func(s grove.TrainingStatus, _ *shepherdv1alpha1.WorkloadRecord) bool { return s.RestartCount == n }
}

func failedCondition(reason string) func(grove.TrainingStatus, *shepherdv1alpha1.WorkloadRecord) bool {
	return func(s grove.TrainingStatus, rec *shepherdv1alpha1.WorkloadRecord) bool {
		c := meta.FindStatusCondition(rec.Status.Conditions, api.ConditionFailed)
		return s.Phase == shepherdv1alpha1.PhaseFailed && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && rec.Status.Reason == reason
	}
}

// checkForm fails unless the set's Training status is in its record and
// nowhere on the set: neither the seed status fields nor the carriers
// (Grove rewrites what it owns; the record is shepherd's).
func (w *world) checkForm(name string) {
	w.t.Helper()
	pcs := w.set(name)
	phase, _, _ := unstructured.NestedString(pcs.Served.Object, "status", "phase")
	count, _, _ := unstructured.NestedInt64(pcs.Served.Object, "status", "restartCount")
	if v, carrier := pcs.Annotations[api.AnnotationTrainingPhase]; carrier || phase != "" || count != 0 {
		w.t.Errorf("%s schema: the set carries Training status (phase field %q, restartCount %d, carrier %q); want it in the record only",
			w.p.name, phase, count, v)
	}
	if meta.FindStatusCondition(pcs.Status.Conditions, api.ConditionFailed) != nil {
		w.t.Errorf("%s schema: shepherd wrote a Failed condition on the set", w.p.name)
	}
	if rec := w.record(name); rec == nil || rec.Spec.WorkloadRef.UID != pcs.UID || metav1.GetControllerOf(rec) == nil || metav1.GetControllerOf(rec).UID != pcs.UID {
		w.t.Errorf("%s schema: record %+v is not controlled by the set %s", w.p.name, rec, pcs.UID)
	}
}

// cliqueRecord is what the set's record keeps about one PodClique.
func (w *world) cliqueRecord(set, clique string) shepherdv1alpha1.CliqueRecord {
	w.t.Helper()
	if rec := w.record(set); rec != nil {
		for _, c := range rec.Status.Cliques {
			if c.Name == clique {
				return c
			}
		}
	}
	return shepherdv1alpha1.CliqueRecord{}
}

// setPods lists every pod of a set.
func (w *world) setPods(name string) []corev1.Pod {
	w.t.Helper()
	var l corev1.PodList
	if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns), client.MatchingLabels{api.LabelPartOf: name}); err != nil {
		w.t.Fatal(err)
	}
	return l.Items
}

func (w *world) waitNoPods(name string) {
	w.t.Helper()
	w.eventually("every pod of "+name+" deleted", func() (bool, error) { return len(w.setPods(name)) == 0, nil })
}

// exitAll makes every pod of a set exit with code.
func (w *world) exitAll(name string, code int32) {
	w.t.Helper()
	for _, p := range w.setPods(name) {
		cluster.SetPodStatus(w.t, w.c, &p, exited(code))
	}
}

// regrow plays Grove after a restart: once the old pods are gone, it
// recreates every clique's pods.
func (w *world) regrow(name string) {
	w.t.Helper()
	w.waitNoPods(name)
	for _, c := range w.cliques(name) {
		for k := range c.Spec.Replicas {
			w.createPod(&c.PodClique, k)
		}
	}
}

// failWorker makes one worker pod exit 1.
func (w *world) failWorker(name string) {
	w.t.Helper()
	p := w.pods(name + "-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p, exited(1))
}

// dumpOnFailure logs the set's state if the test fails.
func (w *world) dumpOnFailure(name string) {
	w.t.Cleanup(func() {
		if !w.t.Failed() {
			return
		}
		for _, c := range w.cliques(name) {
			w.t.Logf("state: %s ann=%v was=%v ready=%d conds=%+v", c.Name, c.Annotations, grove.WasAvailable(&c), c.Status.ReadyReplicas, c.Status.Conditions)
		}
		pcs := w.set(name)
		w.t.Logf("state: set ann=%v status=%+v", pcs.Annotations, pcs.Status)
		if rec := w.record(name); rec != nil {
			w.t.Logf("state: record %+v", rec.Status)
		}
	})
}

// GREP-0285: all pods exit 0 → every PodClique Succeeded, the set Succeeded,
// event WorkloadSucceeded; nothing deleted.
func TestTrainingAllPodsSucceed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(trainingSet("train", 0, nil, nil))
	pending, _ := w.waitSet("train", "Pending", phase(shepherdv1alpha1.PhasePending))
	if pending.StartTime != nil {
		t.Errorf("a Pending set has startTime %v", pending.StartTime)
	}
	w.runAll("train")
	running, _ := w.waitSet("train", "Running with a startTime", func(s grove.TrainingStatus, _ *shepherdv1alpha1.WorkloadRecord) bool {
		return s.Phase == shepherdv1alpha1.PhaseRunning && s.StartTime != nil
	})
	w.checkForm("train")

	w.exitAll("train", 0)
	for _, c := range w.cliques("train") {
		w.eventually("PodClique "+c.Name+" Succeeded in the record", func() (bool, error) {
			return w.cliqueRecord("train", c.Name).Succeeded, nil
		})
	}
	done, _ := w.waitSet("train", "Succeeded", phase(shepherdv1alpha1.PhaseSucceeded))
	if !done.StartTime.Equal(running.StartTime) || done.RestartCount != 0 {
		t.Errorf("startTime %v → %v, restartCount %d; want unchanged and 0", running.StartTime, done.StartTime, done.RestartCount)
	}
	w.waitEvent(api.EventWorkloadSucceeded, "train")
	if n := len(w.setPods("train")); n != 3 {
		t.Errorf("%d pods left, want all 3 kept", n)
	}
}

// GREP-0285: one failure with maxRestarts 0 → Failed/MaxRestartsExceeded at
// once, every pod terminated.
func TestTrainingFailureWithoutRestarts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	before := cluster.MetricOf(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded)
	w.createSet(trainingSet("train", 0, nil, nil))
	w.runAll("train")

	w.failWorker("train")
	st, _ := w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	if st.RestartCount != 0 {
		t.Errorf("restartCount = %d, want 0", st.RestartCount)
	}
	w.checkForm("train")
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRestartsExceeded, "train")
	w.waitEvent(api.EventPodCliqueFailed, "train-0-worker")
	if after := cluster.MetricOf(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded); after < before+1 {
		t.Errorf("shepherd_training_failures_total{reason=MaxRestartsExceeded} = %v, want at least %v", after, before+1)
	}
}

// GREP-0285: a failure within the budget restarts the replica (every pod of
// every clique), then the workload succeeds with restartCount 1 — on Grove's
// schema (carriers) and on the seed schema (fields).
func TestTrainingRestartThenSucceed(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		w.startShepherd()
		before := cluster.MetricOf(t, "shepherd_training_restarts_total")
		w.createSet(trainingSet("train", 1, nil, nil))
		w.dumpOnFailure("train")
		w.runAll("train")
		first, _ := w.waitSet("train", "Running", phase(shepherdv1alpha1.PhaseRunning))

		w.failWorker("train")
		_, _ = w.waitSet("train", "restartCount 1", restarts(1))
		w.checkForm("train")
		ev := w.waitEvent(api.EventReplicaRestarting, "train")
		if !strings.Contains(ev.Note, "restart 1") {
			t.Errorf("ReplicaRestarting note %q does not carry the count", ev.Note)
		}
		w.regrow("train") // every pod of both cliques was deleted
		w.runAll("train")
		w.exitAll("train", 0)

		done, _ := w.waitSet("train", "Succeeded", phase(shepherdv1alpha1.PhaseSucceeded))
		if done.RestartCount != 1 || !done.StartTime.Equal(first.StartTime) {
			t.Errorf("restartCount %d, startTime %v; want 1 and the first start %v", done.RestartCount, done.StartTime, first.StartTime)
		}
		for _, c := range w.cliques("train") {
			if m := w.cliqueRecord("train", c.Name).Restart; m == nil || !m.Done || m.Restart != 1 {
				t.Errorf("PodClique %s: recorded restart = %+v, want restart 1 done", c.Name, m)
			}
			if _, carrier := c.Annotations[api.AnnotationWasAvailable]; carrier || grove.WasAvailable(&c) || c.Annotations[api.AnnotationRestart] != "" {
				t.Errorf("PodClique %s on the %s schema: shepherd's state on the clique (annotations %v, wasAvailable %v)", c.Name, w.p.name, c.Annotations, grove.WasAvailable(&c))
			}
		}
		if after := cluster.MetricOf(t, "shepherd_training_restarts_total"); after < before+1 {
			t.Errorf("shepherd_training_restarts_total = %v, want at least %v", after, before+1)
		}
	})
}

// GREP-0285: maxRuntime exceeded → Failed/MaxRuntimeExceeded, every pod gone.
func TestTrainingMaxRuntimeExceeded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(trainingSet("train", 3, ptr.To(2*time.Second), nil))
	w.runAll("train")
	_, _ = w.waitSet("train", "Failed/MaxRuntimeExceeded", failedCondition(api.ReasonMaxRuntimeExceeded))
	w.checkForm("train")
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRuntimeExceeded, "train")
}

// On a cluster running Grove, Grove's webhook defaults terminationDelay to
// 4h (and rejects 0), and Grove writes MinAvailableBreached itself. A
// Training failure is still answered within seconds: shepherd reads the
// breach from the pods and does not wait for the delay — whoever writes the
// condition, here Grove (gang termination leaves Training sets alone).
func TestTrainingActsBeforeGrovesTerminationDelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fourHours := 4 * time.Hour
	w.createSet(trainingSet("train", 1, nil, &fourHours))
	w.dumpOnFailure("train")
	for _, c := range w.cliques("train") {
		w.groveBreach(c.Name, metav1.ConditionFalse, "SufficientReadyPods", time.Now())
	}
	w.startShepherd()
	w.runAll("train") // the Training wasAvailable carrier is shepherd's in every mode

	w.failWorker("train")
	w.groveBreach("train-0-worker", metav1.ConditionTrue, api.ReasonInsufficientReadyPods, time.Now())
	failedAt := time.Now()
	w.timeout = 15 * time.Second // "within seconds", on a shared machine
	w.waitSet("train", "restartCount 1", restarts(1))
	w.waitNoPods("train")
	t.Logf("restarted %s after the failure (terminationDelay %s)", time.Since(failedAt).Round(time.Millisecond), fourHours)
	w.timeout = pollTimeout
	w.regrow("train")
	w.runAll("train")
	w.exitAll("train", 0)
	w.waitSet("train", "Succeeded", phase(shepherdv1alpha1.PhaseSucceeded))
}

// Stateless: the restart count, the start time and the phase live in the
// set's WorkloadRecord, not in memory, so shepherd stopped and started again
// mid-way goes on with the same counts: a failure while it is down is acted
// on when it is back, and the budget it had spent before is still spent.
func TestTrainingShepherdRestartedMidway(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	first := w.startShepherd()
	w.createSet(trainingSet("train", 2, ptr.To(time.Hour), nil))
	w.dumpOnFailure("train")
	w.runAll("train")
	w.failWorker("train")
	started, _ := w.waitSet("train", "restartCount 1", restarts(1))
	w.regrow("train")
	w.runAll("train")
	first.stop()

	// A failure while shepherd is down: nothing happens until it is back.
	w.failWorker("train")
	w.quiet("shepherd is stopped", 2*time.Second, func() error {
		if st := w.status("train"); st.RestartCount != 1 || len(w.setPods("train")) != 3 {
			return fmt.Errorf("acted while stopped: restartCount %d, %d pods", st.RestartCount, len(w.setPods("train")))
		}
		return nil
	})

	second := w.startShepherd()
	st, _ := w.waitSet("train", "restartCount 2", restarts(2))
	if !st.StartTime.Equal(started.StartTime) {
		t.Errorf("startTime %v after the restart of shepherd, want the first start %v", st.StartTime, started.StartTime)
	}
	w.regrow("train")
	w.runAll("train")
	second.stop()

	// And again: the budget (2) is spent, whichever instance spent it.
	w.startShepherd()
	w.failWorker("train")
	st, _ = w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	if st.RestartCount != 2 {
		t.Errorf("restartCount = %d, want 2", st.RestartCount)
	}
	w.waitNoPods("train")
}

// A restart touches only the failed PodCliqueSet replica — every pod of every
// PodClique in it, PCSG-managed ones included — and the count is one total
// across replicas.
func TestTrainingRestartOnlyTouchesItsReplica(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	spec := setSpec{name: "train", replicas: 2, training: true, maxRestarts: ptr.To[int32](2),
		cliques: []cliqueSpec{{name: "launcher", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 2}}}
	w.createSet(spec)
	w.dumpOnFailure("train")
	w.runAll("train")
	replicaPods := func(idx string) []corev1.Pod {
		var l corev1.PodList
		if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns), client.MatchingLabels{api.LabelPartOf: "train", api.LabelPodCliqueSetReplicaIndex: idx}); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	kept := replicaPods("0")
	if len(kept) != 5 || len(replicaPods("1")) != 5 {
		t.Fatalf("replica pods: %d and %d, want 5 each", len(kept), len(replicaPods("1")))
	}

	p := w.pods("train-1-sg-0-worker")[0]
	cluster.SetPodStatus(w.t, w.c, &p, exited(1))
	w.waitSet("train", "restartCount 1", restarts(1))
	w.eventually("replica 1's pods deleted", func() (bool, error) { return len(replicaPods("1")) == 0, nil })
	now := replicaPods("0")
	if len(now) != len(kept) {
		t.Fatalf("replica 0 has %d pods, want its %d untouched", len(now), len(kept))
	}
	for i := range now {
		if now[i].DeletionTimestamp != nil {
			t.Errorf("replica 0 pod %s is being deleted", now[i].Name)
		}
	}

	for _, c := range w.cliques("train") {
		if c.Labels[api.LabelPodCliqueSetReplicaIndex] == "1" {
			for k := range c.Spec.Replicas {
				w.createPod(&c.PodClique, k)
			}
		}
	}
	w.runAll("train")
	w.exitAll("train", 0)
	done, _ := w.waitSet("train", "Succeeded", phase(shepherdv1alpha1.PhaseSucceeded))
	if done.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", done.RestartCount)
	}
}
