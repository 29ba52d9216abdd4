package grove

import (
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

// waitSet waits until the PodCliqueSet satisfies ok.
func (w *world) waitSet(name, what string, ok func(*grovev1alpha1.PodCliqueSet) bool) *grovev1alpha1.PodCliqueSet {
	w.t.Helper()
	var pcs grovev1alpha1.PodCliqueSet
	w.eventually("PodCliqueSet "+name+": "+what, func() (bool, error) {
		if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, &pcs); err != nil {
			return false, err
		}
		return ok(&pcs), nil
	})
	return &pcs
}

func phase(p grovev1alpha1.PodCliqueSetPhase) func(*grovev1alpha1.PodCliqueSet) bool {
	return func(s *grovev1alpha1.PodCliqueSet) bool { return s.Status.Phase == p }
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

func failedCondition(reason string) func(*grovev1alpha1.PodCliqueSet) bool {
	return func(s *grovev1alpha1.PodCliqueSet) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, api.ConditionFailed)
		return s.Status.Phase == grovev1alpha1.PhaseFailed && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
}

// GREP-0285: all pods exit 0 → every PodClique Succeeded, the set Succeeded,
// event WorkloadSucceeded; nothing deleted.
func TestTrainingAllPodsSucceed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	startShepherd(t, w.ns)
	w.createSet(trainingSet("train", 0, nil, nil))
	pending := w.waitSet("train", "Pending", phase(grovev1alpha1.PhasePending))
	if pending.Status.StartTime != nil {
		t.Errorf("a Pending set has startTime %v", pending.Status.StartTime)
	}
	w.runAll("train")
	running := w.waitSet("train", "Running with a startTime", func(s *grovev1alpha1.PodCliqueSet) bool {
		return s.Status.Phase == grovev1alpha1.PhaseRunning && s.Status.StartTime != nil
	})

	w.exitAll("train", 0)
	for _, c := range w.cliques("train") {
		w.waitClique(c.Name, "Succeeded", func(c *grovev1alpha1.PodClique) bool {
			return meta.IsStatusConditionTrue(c.Status.Conditions, api.ConditionSucceeded)
		})
	}
	done := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
	if !done.Status.StartTime.Equal(running.Status.StartTime) || done.Status.RestartCount != 0 {
		t.Errorf("startTime %v → %v, restartCount %d; want unchanged and 0", running.Status.StartTime, done.Status.StartTime, done.Status.RestartCount)
	}
	w.waitEvent(api.EventWorkloadSucceeded, "train")
	if n := len(w.setPods("train")); n != 3 {
		t.Errorf("%d pods left, want all 3 kept", n)
	}
}

// GREP-0285: one failure with maxRestarts 0 → Failed/MaxRestartsExceeded at
// once (the delay defaults to 0), every pod terminated.
func TestTrainingFailureWithoutRestarts(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	startShepherd(t, w.ns)
	before := counterValue(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded)
	w.createSet(trainingSet("train", 0, nil, nil))
	w.runAll("train")

	p := w.pods("train-0-worker")[0]
	w.kubelet(&p, exited(1))
	pcs := w.waitSet("train", "Failed/MaxRestartsExceeded", failedCondition(api.ReasonMaxRestartsExceeded))
	if pcs.Status.RestartCount != 0 {
		t.Errorf("restartCount = %d, want 0", pcs.Status.RestartCount)
	}
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRestartsExceeded, "train")
	w.waitEvent(api.EventPodCliqueFailed, "train-0-worker")
	if after := counterValue(t, "shepherd_training_failures_total", "reason", api.ReasonMaxRestartsExceeded); after < before+1 {
		t.Errorf("shepherd_training_failures_total{reason=MaxRestartsExceeded} = %v, want at least %v", after, before+1)
	}
}

// GREP-0285: a failure within the budget restarts the replica (every pod of
// every clique), then the workload succeeds with restartCount 1.
func TestTrainingRestartThenSucceed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	startShepherd(t, w.ns)
	before := counterValue(t, "shepherd_training_restarts_total", "", "")
	w.createSet(trainingSet("train", 1, nil, nil))
	w.runAll("train")
	first := w.waitSet("train", "Running", phase(grovev1alpha1.PhaseRunning))

	p := w.pods("train-0-worker")[0]
	w.kubelet(&p, exited(1))
	w.waitSet("train", "restartCount 1", func(s *grovev1alpha1.PodCliqueSet) bool { return s.Status.RestartCount == 1 })
	ev := w.waitEvent(api.EventReplicaRestarting, "train")
	if !strings.Contains(ev.Note, "restart 1") {
		t.Errorf("ReplicaRestarting note %q does not carry the count", ev.Note)
	}
	w.regrow("train") // every pod of both cliques was deleted
	w.runAll("train")
	w.exitAll("train", 0)

	done := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
	if done.Status.RestartCount != 1 || !done.Status.StartTime.Equal(first.Status.StartTime) {
		t.Errorf("restartCount %d, startTime %v; want 1 and the first start %v", done.Status.RestartCount, done.Status.StartTime, first.Status.StartTime)
	}
	for _, c := range w.cliques("train") {
		m, err := gang.Marker(c.Annotations)
		if err != nil || m == nil || !m.Done || m.Restart != 1 {
			t.Errorf("PodClique %s restart marker = %+v (%v), want restart 1 done", c.Name, m, err)
		}
	}
	if after := counterValue(t, "shepherd_training_restarts_total", "", ""); after < before+1 {
		t.Errorf("shepherd_training_restarts_total = %v, want at least %v", after, before+1)
	}
}

// GREP-0285: maxRuntime exceeded → Failed/MaxRuntimeExceeded, every pod gone.
func TestTrainingMaxRuntimeExceeded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	startShepherd(t, w.ns)
	w.createSet(trainingSet("train", 3, ptr.To(2*time.Second), nil))
	w.runAll("train")
	w.waitSet("train", "Failed/MaxRuntimeExceeded", failedCondition(api.ReasonMaxRuntimeExceeded))
	w.waitNoPods("train")
	w.waitEvent(api.EventMaxRuntimeExceeded, "train")
}

// SPEC §2 stateless: shepherd stopped between the breach and the end of its
// delay, started again after → the same outcome and the same counts.
func TestTrainingShepherdRestartBetweenBreachAndDelay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	first := startShepherd(t, w.ns)
	delay := 3 * time.Second
	w.createSet(trainingSet("train", 1, nil, &delay))
	w.runAll("train")

	p := w.pods("train-0-worker")[0]
	w.kubelet(&p, exited(1))
	c := w.waitClique("train-0-worker", "breached", breached(metav1.ConditionTrue, api.ReasonInsufficientReadyPods))
	first.stop()

	// Let the delay run out while shepherd is down.
	since := meta.FindStatusCondition(c.Status.Conditions, api.ConditionMinAvailableBreached).LastTransitionTime.Time
	w.eventually("the delay to run out", func() (bool, error) { return time.Now().After(since.Add(delay + time.Second)), nil })
	if pcs := w.set("train"); pcs.Status.RestartCount != 0 || len(w.setPods("train")) != 3 {
		t.Fatalf("acted while stopped: restartCount %d, %d pods", pcs.Status.RestartCount, len(w.setPods("train")))
	}

	startShepherd(t, w.ns)
	w.waitSet("train", "restartCount 1", func(s *grovev1alpha1.PodCliqueSet) bool { return s.Status.RestartCount == 1 })
	w.regrow("train")
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range w.cliques("train") {
				t.Logf("state: %s ann=%v was=%v ready=%d conds=%+v", c.Name, c.Annotations, c.Status.WasAvailable, c.Status.ReadyReplicas, c.Status.Conditions)
			}
			t.Logf("state: set %+v", w.set("train").Status)
		}
	})
	w.runAll("train")
	w.exitAll("train", 0)
	done := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
	if done.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", done.Status.RestartCount)
	}
}

// A restart touches only the failed PodCliqueSet replica — every pod of every
// PodClique in it, PCSG-managed ones included — and the count is one total
// across replicas.
func TestTrainingRestartOnlyTouchesItsReplica(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	startShepherd(t, w.ns)
	spec := setSpec{name: "train", replicas: 2, training: true, maxRestarts: ptr.To[int32](2),
		cliques: []cliqueSpec{{name: "launcher", replicas: 1, minAvailable: 1}, {name: "worker", replicas: 2, minAvailable: 2}},
		groups:  []groupSpec{{name: "sg", cliques: []string{"worker"}, replicas: 2, minAvailable: 2}}}
	w.createSet(spec)
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
	w.waitSet("train", "restartCount 1", func(s *grovev1alpha1.PodCliqueSet) bool { return s.Status.RestartCount == 1 })
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
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range w.cliques("train") {
				t.Logf("state: %s ann=%v was=%v ready=%d conds=%+v", c.Name, c.Annotations, c.Status.WasAvailable, c.Status.ReadyReplicas, c.Status.Conditions)
			}
			t.Logf("state: set %+v", w.set("train").Status)
		}
	})
	w.runAll("train")
	w.exitAll("train", 0)
	done := w.waitSet("train", "Succeeded", phase(grovev1alpha1.PhaseSucceeded))
	if done.Status.RestartCount != 1 {
		t.Errorf("restartCount = %d, want 1", done.Status.RestartCount)
	}
}
