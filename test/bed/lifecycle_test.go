package bed_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
)

// runtimeCopy creates a ClusterTrainingRuntime name: Trainer's torch
// runtime with the given annotations (shepherd's carriers), deleted when
// the test ends.
func runtimeCopy(t *testing.T, name string, annotations map[string]string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	dir, err := bed.ModuleDir("github.com/kubeflow/trainer/v2")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifests", "base", "runtimes", "torch_distributed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetName(name)
	u.SetAnnotations(annotations)
	u.SetLabels(nil)
	for _, m := range mutate {
		m(u)
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating ClusterTrainingRuntime %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), u); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ClusterTrainingRuntime %s: %v", name, err)
		}
	})
	return u
}

// onRuntime is a TrainJob spec on the named ClusterTrainingRuntime.
func onRuntime(name, image string, numNodes int64) map[string]any {
	return map[string]any{
		"runtimeRef": map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": name},
		"trainer":    map[string]any{"image": image, "numNodes": numNodes},
	}
}

// workloadKinds are the kinds deleteWorkloads deletes.
var workloadKinds = []schema.GroupVersionKind{
	trainJobGVK, jobSetGVK,
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"},
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueScalingGroup"},
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodClique"},
}

// deleteWorkloads deletes the test's TrainJobs, JobSets and Grove objects
// when it ends
// and waits until their pods are gone, so the nodes a later test adds get
// none of them (register it after AddNodes: cleanups run last first).
func deleteWorkloads(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, gvk := range workloadKinds {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := env.Client.DeleteAllOf(ctx, u, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %ss in %s: %v", gvk.Kind, ns, err)
			}
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var pods corev1.PodList
			if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err == nil && len(pods.Items) == 0 {
				return
			}
			if time.Now().After(deadline) {
				var left []string
				for _, p := range pods.Items {
					left = append(left, fmt.Sprintf("%s (node %q, deleted %v, finalizers %v, owners %v)", p.Name, p.Spec.NodeName, p.DeletionTimestamp, p.Finalizers, p.OwnerReferences))
				}
				t.Errorf("the pods of %s were not gone a minute after their workloads were deleted: %v", ns, left)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
}

// getTrainJob reads a TrainJob; nil when it does not exist.
func getTrainJob(t testing.TB, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(trainJobGVK)
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// conditionTrue is the lastTransitionTime of condition typ when it is True.
func conditionTrue(u *unstructured.Unstructured, typ string) (time.Time, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			ts, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
			return ts, true
		}
	}
	return time.Time{}, false
}

// waitComplete waits until Trainer marks the TrainJob Complete and returns
// when it did.
func waitComplete(t *testing.T, ns, name string, within time.Duration) time.Time {
	t.Helper()
	var done time.Time
	eventually(t, within, "Trainer marks TrainJob "+name+" Complete", func() (bool, string) {
		u := getTrainJob(t, ns, name)
		if u == nil {
			return false, "the TrainJob is gone"
		}
		ts, ok := conditionTrue(u, "Complete")
		done = ts
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return ok, fmt.Sprintf("conditions %v; pods %s", conds, podSummary(ns))
	})
	return done
}

// podSummary is each pod of ns: its phase, node and scheduling condition.
func podSummary(ns string) string {
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		sched := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				sched = fmt.Sprintf(" scheduled=%s %s %s", c.Status, c.Reason, c.Message)
			}
		}
		out = append(out, fmt.Sprintf("%s %s node=%q%s", p.Name, p.Status.Phase, p.Spec.NodeName, sched))
	}
	return fmt.Sprintf("%v", out)
}

// ttlDeletion waits until TrainJob name is gone and returns the audit
// record of the delete that took it, failing unless exactly one user
// deleted it and that user is shepherd.
func ttlDeletion(t *testing.T, ns, name string, within time.Duration) bed.Write {
	t.Helper()
	eventually(t, within, "TrainJob "+name+" is deleted after its TTL", func() (bool, string) {
		return getTrainJob(t, ns, name) == nil, "still there"
	})
	ws, err := tb.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var deletes []bed.Write
	for _, w := range ws {
		if w.Verb == "delete" && w.OK() {
			deletes = append(deletes, w)
		}
	}
	if len(deletes) != 1 || deletes[0].User.Username != shepherdUser {
		t.Fatalf("TrainJob %s deleted by %d requests, want exactly one by %s:\n%s", name, len(deletes), shepherdUser, list(deletes))
	}
	return deletes[0]
}

// dependentsGone waits until the garbage collector has removed what
// Trainer, JobSet and the Job controller made for a deleted TrainJob:
// its JobSet, Jobs, Pods and Trainer's runtime snapshot.
func dependentsGone(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, time.Minute, "the garbage collector removes the dependents of TrainJob "+name, func() (bool, string) {
		var left []string
		js := &unstructured.Unstructured{}
		js.SetGroupVersionKind(jobSetGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, js); err == nil {
			left = append(left, "JobSet")
		}
		var jobs batchv1.JobList
		if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err == nil && len(jobs.Items) > 0 {
			left = append(left, fmt.Sprintf("%d Jobs", len(jobs.Items)))
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err == nil && len(pods.Items) > 0 {
			left = append(left, fmt.Sprintf("%d Pods", len(pods.Items)))
		}
		var cm corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-runtime-snapshot"}, &cm); err == nil {
			left = append(left, "runtime snapshot ConfigMap")
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
	// The JobSet went by the garbage collector (kube-controller-manager's
	// identity), not by shepherd.
	ws, err := tb.Writes("jobsets", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Verb == "delete" && w.OK() && w.User.Username != bed.KCMUser {
			t.Errorf("JobSet %s deleted by %s, want only by the garbage collector (%s)", name, w.User.Username, bed.KCMUser)
		}
	}
}

// lifecycleEvent finds shepherd's Event of reason for the named object.
func lifecycleEvent(t *testing.T, ns, name, reason string) *eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i, e := range evs.Items {
		if e.Reason == reason && e.Regarding.Name == name {
			return &evs.Items[i]
		}
	}
	return nil
}

// TestTTLThroughTheRealChain: a TrainJob on a runtime whose carrier sets a
// TTL of 5 s runs on kwok nodes to completion through Trainer, JobSet and
// the Job controller; shepherd deletes it 5 s after Trainer marked it
// Complete (one delete, with its TTLExpired Event), and the garbage
// collector removes its JobSet, Jobs, Pods and runtime snapshot.
func TestTTLThroughTheRealChain(t *testing.T) {
	ns := env.Namespace(t)
	tb.AddNodes(t, "ttl", bed.Nodes{Count: 2})
	deleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl", "ttl", 5
	runtimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: fmt.Sprint(ttl)})
	trainJob(t, ns, name, 2, onRuntime(rt, "docker.io/torch-run", 2))

	done := waitComplete(t, ns, name, 2*time.Minute)
	del := ttlDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("Complete at %s, deleted by %s %v later", done.Format(time.RFC3339), del.User.Username, after.Round(100*time.Millisecond))
	// The condition's time has one-second resolution.
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want %ds (±1 s of the condition's resolution, +4 s of reconcile)", after, ttl)
	}
	if lifecycleEvent(t, ns, name, api.EventTTLExpired) == nil {
		t.Errorf("no %s Event for TrainJob %s", api.EventTTLExpired, name)
	}
	dependentsGone(t, ns, name)
}

// TestTTLRuntimeDeletedWhileRunning: Trainer v2.3.0 lets a runtime be
// deleted while its TrainJobs run (it keeps a snapshot of the runtime per
// job). The TTL of the runtime the job started on still applies: shepherd
// reads it from Trainer's snapshot and deletes the finished job on time.
func TestTTLRuntimeDeletedWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	tb.AddNodes(t, "ttl-del", bed.Nodes{Count: 1})
	deleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl-deleted", "ttl-deleted", 3
	u := runtimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: fmt.Sprint(ttl)})
	trainJob(t, ns, name, 1, onRuntime(rt, bed.SlowImage, 1))
	waitJobSet(t, ns, name)
	eventually(t, time.Minute, "Trainer snapshots the runtime", func() (bool, string) {
		var cm corev1.ConfigMap
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-runtime-snapshot"}, &cm)
		return err == nil, fmt.Sprint(err)
	})
	if err := env.Client.Delete(ctx, u); err != nil {
		t.Fatalf("deleting the runtime while the job runs: %v", err)
	}
	done := waitComplete(t, ns, name, 2*time.Minute)
	del := ttlDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("runtime deleted while running; Complete at %s, deleted %v later", done.Format(time.RFC3339), after.Round(100*time.Millisecond))
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want %ds from the snapshot of its deleted runtime", after, ttl)
	}
	dependentsGone(t, ns, name)
}

// TestTTLRuntimeChangedWhileRunning: a runtime's TTL changed while a job
// runs applies to it (KEP-2899: the runtime's TTL applies), counted from
// the later of its finish and the change: a TTL cut from an hour to 3 s
// deletes the job 3 s after it completes.
func TestTTLRuntimeChangedWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	tb.AddNodes(t, "ttl-chg", bed.Nodes{Count: 1})
	deleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl-changed", "ttl-changed", 3
	u := runtimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: "3600"})
	trainJob(t, ns, name, 1, onRuntime(rt, bed.SlowImage, 1))
	waitJobSet(t, ns, name)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, api.AnnotationTTLSecondsAfterFinished, ttl))
	if err := env.Client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("changing the runtime's TTL while the job runs: %v", err)
	}
	changed := time.Now()
	done := waitComplete(t, ns, name, 2*time.Minute)
	if !done.After(changed) {
		t.Fatalf("the job completed (%s) before its runtime's TTL was changed (%s): the test needs it running", done, changed)
	}
	del := ttlDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("TTL 3600 -> %d s while running; Complete at %s, deleted %v later", ttl, done.Format(time.RFC3339), after.Round(100*time.Millisecond))
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want the changed TTL, %ds", after, ttl)
	}
	dependentsGone(t, ns, name)
}

// bound counts the pods of ns bound to a node, and all of them.
func bound(t *testing.T, ns string) (int, int, []corev1.Pod) {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n, len(pods.Items), pods.Items
}

// TestGangSchedulingWithTheRealScheduler: a 4-node TrainJob on a runtime
// with the Workload API (carrier shepherd.dev/pod-group-policy: workload)
// gets shepherd's Workload and PodGroup, and its pods carry the PodGroup's
// name; kube-scheduler's gang scheduling then binds none of them while the
// kwok nodes have room for 3, and all four once there is room for 4.
func TestGangSchedulingWithTheRealScheduler(t *testing.T) {
	ns := env.Namespace(t)
	// One pod per node.
	tb.AddNodes(t, "gang-a", bed.Nodes{Count: 3, Pods: 1})
	deleteWorkloads(t, ns)
	const rt, name, nodes = "torch-gang", "gang", 4
	runtimeCopy(t, rt, map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload})
	trainJob(t, ns, name, nodes, onRuntime(rt, bed.RunForeverImage, nodes))

	var pods []corev1.Pod
	eventually(t, 2*time.Minute, "the Job controller creates the 4 pods, each in shepherd's PodGroup", func() (bool, string) {
		_, all, ps := bound(t, ns)
		pods = ps
		grouped := 0
		for _, p := range ps {
			if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName != "" {
				grouped++
			}
		}
		return all == nodes && grouped == nodes, fmt.Sprintf("%d pods, %d with a podGroupName", all, grouped)
	})
	group := *pods[0].Spec.SchedulingGroup.PodGroupName
	pg := &unstructured.Unstructured{}
	pg.SetAPIVersion("scheduling.k8s.io/v1beta1")
	pg.SetKind("PodGroup")
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: group}, pg); err != nil {
		t.Fatalf("the pods' PodGroup %s: %v", group, err)
	}
	t.Logf("pods in PodGroup %s (spec %v)", group, pg.Object["spec"])
	// With room for 3, the gang waits whole: give the scheduler time to
	// have tried (it binds a pod within a second when it can, below).
	time.Sleep(10 * time.Second)
	if n, all, _ := bound(t, ns); n != 0 {
		t.Fatalf("%d of %d pods bound with room for 3: the gang was split", n, all)
	}
	added := time.Now()
	tb.AddNodes(t, "gang-b", bed.Nodes{Count: 1, Pods: 1})
	eventually(t, time.Minute, "all 4 pods bind once there is room for 4", func() (bool, string) {
		n, all, _ := bound(t, ns)
		return n == nodes, fmt.Sprintf("%d of %d bound", n, all)
	})
	t.Logf("all %d pods bound %v after the fourth node", nodes, time.Since(added).Round(100*time.Millisecond))
	ws, err := tb.Writes("pods", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	binds := 0
	for _, w := range ws {
		if w.ObjectRef.Subresource == "binding" && w.OK() {
			binds++
			if w.User.Username != bed.SchedulerUser {
				t.Errorf("pod bound by %s, want %s", w.User.Username, bed.SchedulerUser)
			}
		}
	}
	if binds != nodes {
		t.Errorf("%d bindings, want %d (one per pod)", binds, nodes)
	}
}

// TestInOrderBecomesDependsOn: a JobSet asking for the deprecated
// startupPolicy InOrder is rewritten by shepherd (D-JS-2) into the
// dependsOn chain, with a warning to the client; the real JobSet
// controller then creates the workers' Job only after the leader's pod is
// Ready (kwok makes it so).
func TestInOrderBecomesDependsOn(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	tb.AddNodes(t, "inorder", bed.Nodes{Count: 3})
	deleteWorkloads(t, ns)
	pod := func() map[string]any {
		return map[string]any{"template": map[string]any{"spec": map[string]any{
			"parallelism": int64(1), "completions": int64(1),
			"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never",
				"containers":    []any{map[string]any{"name": "c", "image": bed.RunForeverImage}}}}}}}
	}
	leader, workers := pod(), pod()
	leader["name"], workers["name"] = "leader", "workers"
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(jobSetGVK)
	js.SetNamespace(ns)
	js.SetName("inorder")
	js.Object["spec"] = map[string]any{
		"startupPolicy":  map[string]any{"startupPolicyOrder": "InOrder"},
		"replicatedJobs": []any{leader, workers},
	}
	warnings := &warningRecorder{}
	c, err := client.New(warnings.config(env.Config), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, js); err != nil {
		t.Fatalf("creating a JobSet with startupPolicy InOrder: %v", err)
	}
	if !warnings.contains("InOrder is deprecated and was rewritten") {
		t.Errorf("no rewrite warning returned to the client; warnings: %q", warnings.all())
	}
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	deps, _, _ := unstructured.NestedSlice(rjs[1].(map[string]any), "dependsOn")
	if len(deps) != 1 || deps[0].(map[string]any)["name"] != "leader" || deps[0].(map[string]any)["status"] != "Ready" {
		t.Fatalf("workers' dependsOn as stored: %v, want [{leader Ready}]", deps)
	}

	var leaderReady, workersCreated time.Time
	eventually(t, 2*time.Minute, "the JobSet controller creates the workers' Job", func() (bool, string) {
		var jobs batchv1.JobList
		if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, j := range jobs.Items {
			names = append(names, j.Name)
			if strings.Contains(j.Name, "-workers-") {
				workersCreated = j.CreationTimestamp.Time
			}
		}
		return !workersCreated.IsZero(), fmt.Sprintf("Jobs %v", names)
	})
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !strings.Contains(p.Name, "-leader-") {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				leaderReady = c.LastTransitionTime.Time
			}
		}
	}
	if leaderReady.IsZero() {
		t.Fatalf("the workers' Job exists but no leader pod is Ready")
	}
	t.Logf("leader pod Ready at %s, workers' Job created at %s", leaderReady.Format(time.RFC3339), workersCreated.Format(time.RFC3339))
	if workersCreated.Before(leaderReady) {
		t.Errorf("the workers' Job was created (%s) before the leader was Ready (%s)", workersCreated, leaderReady)
	}
	// Only the JobSet controller created the Jobs.
	if got := creators(t, "jobs", ns); len(got) != 1 || got[bed.JobSetUser] != 2 {
		t.Errorf("Jobs created by %v, want 2 by %s", got, bed.JobSetUser)
	}
}

// warningRecorder keeps the warnings the apiserver returns to a client.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningRecorder) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WarningHandler = w
	return c
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

func (w *warningRecorder) contains(s string) bool {
	return slices.ContainsFunc(w.all(), func(m string) bool { return strings.Contains(m, s) })
}

// TestDeadlineOnBesideTrainer: with the deadline set on, serve warns at
// start that Trainer enforces it too, and both acting makes no write
// fight: the TrainJob gets one Failed transition (reason
// DeadlineExceeded), shepherd writes its status at most once, and the
// condition stays as written.
func TestDeadlineOnBesideTrainer(t *testing.T) {
	s := serveWith(t, "--feature=trainjob-deadline=on", "--zap-log-level=info")
	ns := env.Namespace(t)
	deleteWorkloads(t, ns)
	eventually(t, 30*time.Second, "serve warns that Trainer enforces the deadline too", func() (bool, string) {
		return strings.Contains(s.Log(), "the upstream operator enforces this feature too"), "no warning in serve's log yet"
	})
	const name = "deadline-on"
	trainJob(t, ns, name, 1, map[string]any{"activeDeadlineSeconds": int64(5)})
	var failed time.Time
	eventually(t, 2*time.Minute, "the TrainJob fails at its deadline", func() (bool, string) {
		u := getTrainJob(t, ns, name)
		if u == nil {
			return false, "gone"
		}
		ts, ok := conditionTrue(u, "Failed")
		failed = ts
		return ok, "no Failed=True condition yet"
	})
	// Both would have acted by now (each requeues at the deadline).
	time.Sleep(5 * time.Second)
	u := getTrainJob(t, ns, name)
	ts, ok := conditionTrue(u, "Failed")
	if !ok || !ts.Equal(failed) {
		t.Errorf("the Failed condition changed after it was written: now %v (true %v), was %v", ts, ok, failed)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Failed" && m["reason"] != "DeadlineExceeded" {
			t.Errorf("Failed reason %v, want DeadlineExceeded", m["reason"])
		}
	}
	ws, err := tb.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]int{}
	for _, w := range ws {
		if w.OK() && w.ObjectRef.Subresource == "status" {
			byUser[w.User.Username]++
		}
	}
	t.Logf("status writes to TrainJob %s: %v", name, byUser)
	if byUser[shepherdUser] > 1 {
		t.Errorf("shepherd wrote the TrainJob's status %d times, want at most once:\n%s", byUser[shepherdUser], list(ws))
	}
}

// TestInitializerNotGangScheduled: a runtime with a dataset initializer
// gets a Workload of two PodGroup templates — the initializer's basic, the
// trainer's a gang of numNodes — and kube-scheduler treats them so: on two
// one-pod nodes the initializer's pod binds at once while the 4-node
// trainer gang waits whole.
func TestInitializerNotGangScheduled(t *testing.T) {
	ns := env.Namespace(t)
	tb.AddNodes(t, "init", bed.Nodes{Count: 2, Pods: 1})
	deleteWorkloads(t, ns)
	const rt, name, nodes = "torch-initializer", "init", 4
	runtimeCopy(t, rt, map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload}, func(u *unstructured.Unstructured) {
		rjs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "replicatedJobs")
		initializer := map[string]any{
			"name": "dataset-initializer",
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
					"restartPolicy": "Never",
					"containers":    []any{map[string]any{"name": "dataset-initializer", "image": bed.RunForeverImage}},
				}}},
			},
		}
		if err := unstructured.SetNestedSlice(u.Object, append([]any{initializer}, rjs...), "spec", "template", "spec", "replicatedJobs"); err != nil {
			t.Fatal(err)
		}
	})
	trainJob(t, ns, name, nodes, onRuntime(rt, bed.RunForeverImage, nodes))

	groupOf := func(p corev1.Pod) string {
		if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
			return *sg.PodGroupName
		}
		return ""
	}
	var initPod *corev1.Pod
	eventually(t, 2*time.Minute, "the initializer's pod binds while the trainer gang waits", func() (bool, string) {
		_, all, pods := bound(t, ns)
		initPod = nil
		trainers, trainersBound := 0, 0
		for i, p := range pods {
			if strings.Contains(p.Name, "-dataset-initializer-") {
				initPod = &pods[i]
				continue
			}
			trainers++
			if p.Spec.NodeName != "" {
				trainersBound++
			}
		}
		if trainersBound > 0 {
			t.Fatalf("%d of %d trainer pods bound on two one-pod nodes: the gang of %d was split", trainersBound, trainers, nodes)
		}
		return initPod != nil && initPod.Spec.NodeName != "" && trainers == nodes,
			fmt.Sprintf("%d pods (%d trainers); %s", all, trainers, podSummary(ns))
	})
	// One node is still free: without the gang a trainer pod would take
	// it within a second.
	time.Sleep(5 * time.Second)
	_, _, pods := bound(t, ns)
	for _, p := range pods {
		if !strings.Contains(p.Name, "-dataset-initializer-") && p.Spec.NodeName != "" {
			t.Errorf("trainer pod %s bound to %s beside a free node: the gang of %d was split", p.Name, p.Spec.NodeName, nodes)
		}
	}
	ctx := context.Background()
	group := groupOf(*initPod)
	if group == "" {
		t.Fatalf("the initializer's pod %s has no PodGroup", initPod.Name)
	}
	pg := &unstructured.Unstructured{}
	pg.SetAPIVersion("scheduling.k8s.io/v1beta1")
	pg.SetKind("PodGroup")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, pg); err != nil {
		t.Fatalf("the initializer's PodGroup %s: %v", group, err)
	}
	policy, _, _ := unstructured.NestedMap(pg.Object, "spec", "schedulingPolicy")
	if _, gang := policy["gang"]; gang || policy["basic"] == nil {
		t.Errorf("the initializer's PodGroup %s has schedulingPolicy %v, want basic", group, policy)
	}
	t.Logf("initializer pod %s bound to %s in PodGroup %s (%v); the 4 trainer pods wait", initPod.Name, initPod.Spec.NodeName, group, policy)
}
