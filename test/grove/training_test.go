package grove

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// trainingSet is one replica of a launcher (1 pod) and workers (2 pods).
func trainingSet(name string, maxRestarts int32, maxRuntime, delay *time.Duration) setSpec {
	return setSpec{name: name, replicas: 1, training: true, maxRestarts: &maxRestarts, maxRuntime: maxRuntime, delay: delay,
		cliques: []cliqueSpec{{name: "launcher", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}}}
}

func (w *world) set(name string) *grovev1alpha1.PodCliqueSet {
	w.t.Helper()
	var pcs grovev1alpha1.PodCliqueSet
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, &pcs); err != nil {
		w.t.Fatal(err)
	}
	return &pcs
}

// status is a set's Training status, from the fields or the carriers.
func (w *world) status(pcs *grovev1alpha1.PodCliqueSet) grove.TrainingStatus {
	w.t.Helper()
	st, err := grove.TrainingStatusOf(pcs)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// waitSet waits until the PodCliqueSet's Training status satisfies ok.
func (w *world) waitSet(name, what string, ok func(grove.TrainingStatus, *grovev1alpha1.PodCliqueSet) bool) (grove.TrainingStatus, *grovev1alpha1.PodCliqueSet) {
	w.t.Helper()
	var pcs grovev1alpha1.PodCliqueSet
	var st grove.TrainingStatus
	w.eventually("PodCliqueSet "+name+": "+what, func() (bool, error) {
		if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, &pcs); err != nil {
			return false, err
		}
		var err error
		if st, err = grove.TrainingStatusOf(&pcs); err != nil {
			return false, err
		}
		return ok(st, &pcs), nil
	})
	return st, &pcs
}

func phase(p grovev1alpha1.PodCliqueSetPhase) func(grove.TrainingStatus, *grovev1alpha1.PodCliqueSet) bool {
	return func(s grove.TrainingStatus, _ *grovev1alpha1.PodCliqueSet) bool { return s.Phase == p }
}

func restarts(n int32) func(grove.TrainingStatus, *grovev1alpha1.PodCliqueSet) bool {
	return func(s grove.TrainingStatus, _ *grovev1alpha1.PodCliqueSet) bool { return s.RestartCount == n }
}

func failedCondition(reason string) func(grove.TrainingStatus, *grovev1alpha1.PodCliqueSet) bool {
	return func(s grove.TrainingStatus, pcs *grovev1alpha1.PodCliqueSet) bool {
		c := meta.FindStatusCondition(pcs.Status.Conditions, api.ConditionFailed)
		return s.Phase == grovev1alpha1.PhaseFailed && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
}

// checkForm fails unless the set's Training status is where the platform's
// schema keeps it: the seed status fields, or the carriers (Grove's schema
// prunes the fields).
func (w *world) checkForm(pcs *grovev1alpha1.PodCliqueSet) {
	w.t.Helper()
	_, carrier := pcs.Annotations[api.AnnotationTrainingPhase]
	field := pcs.Status.Phase != ""
	if w.p.seed && (!field || carrier) || !w.p.seed && (field || !carrier) {
		w.t.Errorf("%s schema: phase field %q, carrier %q; want the %s", w.p.name, pcs.Status.Phase, pcs.Annotations[api.AnnotationTrainingPhase],
			map[bool]string{true: "field", false: "carrier"}[w.p.seed])
	}
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
		w.kubelet(&p, exited(code))
	}
}

// regrow plays Grove after a restart: once the old pods are gone, it
// recreates every clique's pods.
func (w *world) regrow(name string) {
	w.t.Helper()
	w.waitNoPods(name)
	for _, c := range w.cliques(name) {
		for k := range c.Spec.Replicas {
			w.createPod(&c, k)
		}
	}
}

// failWorker makes one worker pod exit 1.
func (w *world) failWorker(name string) {
	w.t.Helper()
	p := w.pods(name + "-0-worker")[0]
	w.kubelet(&p, exited(1))
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
	})
}

// GREP-0285: all pods exit 0 → every PodClique Succeeded, the set Succeeded,
// event WorkloadSucceeded; nothing deleted.
func TestTrainingAllPodsSucceed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startShepherd()
	w.createSet(trainingSet("train", 0, nil, nil))
	pending, _ := w.waitSet("train", "Pending", phase(grovev1alpha1.PhasePending))
	if pending.StartTime != nil {
		t.Errorf("a Pending set has startTime %v", pending.StartTime)
	}
	w.runAll("train")
	running, pcs := w.waitSet("train", "Running with a startTime", func(s grove.TrainingStatus, _ *grovev1alpha1.PodCliqueSet) bool {
		return s.Phase == grovev1alpha1.PhaseRunning && s.StartTime != nil
	})
	w.checkForm(pcs)

	w.exitAll("train", 0)
	for _, c := range w.cliques("train") {
		w.waitClique(c.Name, "Succeeded", func(c *grovev1alpha1.PodClique) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, api.ConditionSucceeded)
		})
	}
	done, _ := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
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
	before := counterValue(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded)
	w.createSet(trainingSet("train", 0, nil, nil))
	w.runAll("train")

	w.failWorker("train")
	st, pcs := w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	if st.RestartCount != 0 {
		t.Errorf("restartCount = %d, want 0", st.RestartCount)
	}
	w.checkForm(pcs)
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRestartsExceeded, "train")
	w.waitEvent(api.EventPodCliqueFailed, "train-0-worker")
	if after := counterValue(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded); after < before+1 {
		t.Errorf("shepherd_training_failures_total{reason=MaxRestartsExceeded} = %v, want at least %v", after, before+1)
	}
}

// GREP-0285: a failure within the budget restarts the replica (every pod of
// every clique), then the workload succeeds with restartCount 1 — on Grove's
// schema (carriers) and on the seed schema (fields).
func TestTrainingRestartThenSucceed(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		w.startShepherd()
		before := counterValue(t, "shepherd_training_restarts_total", "", "")
		w.createSet(trainingSet("train", 1, nil, nil))
		w.dumpOnFailure("train")
		w.runAll("train")
		first, _ := w.waitSet("train", "Running", phase(grovev1alpha1.PhaseRunning))

		w.failWorker("train")
		_, pcs := w.waitSet("train", "restartCount 1", restarts(1))
		w.checkForm(pcs)
		ev := w.waitEvent(api.EventReplicaRestarting, "train")
		if !strings.Contains(ev.Note, "restart 1") {
			t.Errorf("ReplicaRestarting note %q does not carry the count", ev.Note)
		}
		w.regrow("train") // every pod of both cliques was deleted
		w.runAll("train")
		w.exitAll("train", 0)

		done, _ := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
		if done.RestartCount != 1 || !done.StartTime.Equal(first.StartTime) {
			t.Errorf("restartCount %d, startTime %v; want 1 and the first start %v", done.RestartCount, done.StartTime, first.StartTime)
		}
		for _, c := range w.cliques("train") {
			m, err := gang.Marker(c.Annotations)
			if err != nil || m == nil || !m.Done || m.Restart != 1 {
				t.Errorf("PodClique %s restart marker = %+v (%v), want restart 1 done", c.Name, m, err)
			}
			if _, carrier := c.Annotations[api.AnnotationWasAvailable]; carrier == w.p.seed {
				t.Errorf("PodClique %s on the %s schema: wasAvailable carrier present = %v", c.Name, w.p.name, carrier)
			}
		}
		if after := counterValue(t, "shepherd_training_restarts_total", "", ""); after < before+1 {
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
	_, pcs := w.waitSet("train", "Failed/MaxRuntimeExceeded", failedCondition(api.ReasonMaxRuntimeExceeded))
	w.checkForm(pcs)
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRuntimeExceeded, "train")
}

// On a cluster running Grove, Grove's webhook defaults terminationDelay to
// 4h (and rejects 0), and Grove writes MinAvailableBreached itself. A
// Training failure is still answered within seconds: shepherd reads the
// breach from the pods and does not wait for the delay — whoever writes the
// condition, here Grove, which shepherd's gang controllers leave alone.
func TestTrainingActsBeforeGrovesTerminationDelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	fourHours := 4 * time.Hour
	w.createSet(trainingSet("train", 1, nil, &fourHours))
	w.dumpOnFailure("train")
	for _, c := range w.cliques("train") {
		w.groveBreach(c.Name, metav1.ConditionFalse, "SufficientReadyPods", time.Now())
	}
	s := w.startShepherd()
	w.eventually("shepherd to see Grove enforce gang termination", func() (bool, error) {
		return !s.enf.Enforces(integrations.FeatureGangTermination), nil
	})
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
	w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
}

// SPEC §2 stateless: the restart count, the start time and the phase live in
// the object (on Grove's schema, in their carriers), so shepherd stopped
// and started again mid-way goes on with the same counts: a failure while
// it is down is acted on when it is back, and the budget it had spent before
// is still spent.
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
		if st := w.status(w.set("train")); st.RestartCount != 1 || len(w.setPods("train")) != 3 {
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
	w.kubelet(&p, exited(1))
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
				w.createPod(&c, k)
			}
		}
	}
	w.runAll("train")
	w.exitAll("train", 0)
	done, _ := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
	if done.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", done.RestartCount)
	}
}
