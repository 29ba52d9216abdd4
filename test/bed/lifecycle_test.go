package bed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
)

// TestTTLThroughTheRealChain: a TrainJob on a runtime whose carrier sets a
// TTL of 5 s runs on kwok nodes to completion through Trainer, JobSet and
// the Job controller; shepherd deletes it 5 s after Trainer marked it
// Complete (one delete, with its TTLExpired Event), and the garbage
// collector removes its JobSet, Jobs, Pods and runtime snapshot.
func TestTTLThroughTheRealChain(t *testing.T) {
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "ttl", bed.Nodes{Count: 2})
	kit.DeleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl", "ttl", 5
	kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: fmt.Sprint(ttl)})
	kit.TrainJob(t, ns, name, 2, bed.OnRuntime(rt, "docker.io/torch-run", 2))

	done := kit.WaitComplete(t, ns, name, 2*time.Minute)
	del := kit.TTLDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("Complete at %s, deleted by %s %v later", done.Format(time.RFC3339), del.User.Username, after.Round(100*time.Millisecond))
	// The condition's time has one-second resolution.
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want %ds (±1 s of the condition's resolution, +4 s of reconcile)", after, ttl)
	}
	if len(kit.Events(t, ns, name, api.EventTTLExpired)) == 0 {
		t.Errorf("no %s Event for TrainJob %s", api.EventTTLExpired, name)
	}
	kit.DependentsGone(t, ns, name)
	// shepherd read the runtime (read as served, unstructured) at
	// admission and at every reconcile, from its informer cache: at most
	// one GET, by an admission lookup that missed the cache the moment
	// after the runtime was created (webhook/lookups.go reads a miss live).
	gets, err := kit.Bed.Gets("clustertrainingruntimes", "", rt)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(gets, shepherdUser); len(mine) > 1 {
		t.Errorf("shepherd read ClusterTrainingRuntime %s from the apiserver %d times, want at most 1 (its cache answers):\n%s", rt, len(mine), bed.Lines(mine))
	}
}

// TestTTLRuntimeDeletedWhileRunning: Trainer v2.3.0 lets a runtime be
// deleted while its TrainJobs run (it keeps a snapshot of the runtime per
// job). The TTL of the runtime the job started on still applies: shepherd
// reads it from Trainer's snapshot and deletes the finished job on time.
func TestTTLRuntimeDeletedWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "ttl-del", bed.Nodes{Count: 1})
	kit.DeleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl-deleted", "ttl-deleted", 3
	u := kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: fmt.Sprint(ttl)})
	kit.TrainJob(t, ns, name, 1, bed.OnRuntime(rt, bed.SlowImage, 1))
	kit.WaitJobSet(t, ns, name)
	kit.Eventually(t, time.Minute, "Trainer snapshots the runtime", func() (bool, string) {
		var cm corev1.ConfigMap
		err := kit.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-runtime-snapshot"}, &cm)
		return err == nil, fmt.Sprint(err)
	})
	if err := kit.Cluster.Client.Delete(ctx, u); err != nil {
		t.Fatalf("deleting the runtime while the job runs: %v", err)
	}
	done := kit.WaitComplete(t, ns, name, 2*time.Minute)
	del := kit.TTLDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("runtime deleted while running; Complete at %s, deleted %v later", done.Format(time.RFC3339), after.Round(100*time.Millisecond))
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want %ds from the snapshot of its deleted runtime", after, ttl)
	}
	kit.DependentsGone(t, ns, name)
}

// TestTTLRuntimeChangedWhileRunning: a runtime's TTL changed while a job
// runs applies to it (KEP-2899: the runtime's TTL applies), counted from
// the later of its finish and the change: a TTL cut from an hour to 3 s
// deletes the job 3 s after it completes.
func TestTTLRuntimeChangedWhileRunning(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "ttl-chg", bed.Nodes{Count: 1})
	kit.DeleteWorkloads(t, ns)
	const rt, name, ttl = "torch-ttl-changed", "ttl-changed", 3
	u := kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: "3600"})
	kit.TrainJob(t, ns, name, 1, bed.OnRuntime(rt, bed.SlowImage, 1))
	kit.WaitJobSet(t, ns, name)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, api.AnnotationTTLSecondsAfterFinished, ttl))
	if err := kit.Cluster.Client.Patch(ctx, u, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("changing the runtime's TTL while the job runs: %v", err)
	}
	changed := time.Now()
	done := kit.WaitComplete(t, ns, name, 2*time.Minute)
	if !done.After(changed) {
		t.Fatalf("the job completed (%s) before its runtime's TTL was changed (%s): the test needs it running", done, changed)
	}
	del := kit.TTLDeletion(t, ns, name, time.Minute)
	after := del.StageTimestamp.Sub(done)
	t.Logf("TTL 3600 -> %d s while running; Complete at %s, deleted %v later", ttl, done.Format(time.RFC3339), after.Round(100*time.Millisecond))
	if after < (ttl-1)*time.Second || after > (ttl+5)*time.Second {
		t.Errorf("deleted %v after it completed, want the changed TTL, %ds", after, ttl)
	}
	kit.DependentsGone(t, ns, name)
}

// bound counts the pods of ns bound to a node, and all of them.
func bound(t *testing.T, ns string) (int, int, []corev1.Pod) {
	t.Helper()
	var pods corev1.PodList
	if err := kit.Cluster.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
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
	ns := kit.Cluster.Namespace(t)
	// One pod per node.
	kit.Bed.AddNodes(t, "gang-a", bed.Nodes{Count: 3, Pods: 1})
	kit.DeleteWorkloads(t, ns)
	const rt, name, nodes = "torch-gang", "gang", 4
	kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload})
	kit.TrainJob(t, ns, name, nodes, bed.OnRuntime(rt, bed.RunForeverImage, nodes))

	var pods []corev1.Pod
	kit.Eventually(t, 2*time.Minute, "the Job controller creates the 4 pods, each in shepherd's PodGroup", func() (bool, string) {
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
	if err := kit.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: group}, pg); err != nil {
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
	kit.Bed.AddNodes(t, "gang-b", bed.Nodes{Count: 1, Pods: 1})
	kit.Eventually(t, time.Minute, "all 4 pods bind once there is room for 4", func() (bool, string) {
		n, all, _ := bound(t, ns)
		return n == nodes, fmt.Sprintf("%d of %d bound", n, all)
	})
	t.Logf("all %d pods bound %v after the fourth node", nodes, time.Since(added).Round(100*time.Millisecond))
	ws, err := kit.Bed.Writes("pods", ns, "")
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
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "inorder", bed.Nodes{Count: 3})
	kit.DeleteWorkloads(t, ns)
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
	c, warnings := kit.Cluster.WarningsClient(t)
	if err := c.Create(ctx, js); err != nil {
		t.Fatalf("creating a JobSet with startupPolicy InOrder: %v", err)
	}
	if !warnings.Contains("InOrder is deprecated and was rewritten") {
		t.Errorf("no rewrite warning returned to the client; warnings: %q", warnings.Take())
	}
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	deps, _, _ := unstructured.NestedSlice(rjs[1].(map[string]any), "dependsOn")
	if len(deps) != 1 || deps[0].(map[string]any)["name"] != "leader" || deps[0].(map[string]any)["status"] != "Ready" {
		t.Fatalf("workers' dependsOn as stored: %v, want [{leader Ready}]", deps)
	}

	var leaderReady, workersCreated time.Time
	kit.Eventually(t, 2*time.Minute, "the JobSet controller creates the workers' Job", func() (bool, string) {
		var jobs batchv1.JobList
		if err := kit.Cluster.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
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
	if err := kit.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
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
	if got := kit.Creators(t, "jobs", ns); len(got) != 1 || got[bed.JobSetUser] != 2 {
		t.Errorf("Jobs created by %v, want 2 by %s", got, bed.JobSetUser)
	}
}

// TestDeadlineOnBesideTrainer: with the deadline set on, serve warns at
// start that Trainer enforces it too, and both acting makes no write
// fight: the TrainJob gets one Failed transition (reason
// DeadlineExceeded), shepherd writes its status at most once, and the
// condition stays as written.
func TestDeadlineOnBesideTrainer(t *testing.T) {
	s := kit.ServeWith(t, "--feature=trainjob-deadline=on", "--zap-log-level=info")
	ns := kit.Cluster.Namespace(t)
	kit.DeleteWorkloads(t, ns)
	kit.Eventually(t, 30*time.Second, "serve warns that Trainer enforces the deadline too", func() (bool, string) {
		return strings.Contains(s.Log(), "the upstream operator enforces this feature too"), "no warning in serve's log yet"
	})
	const name = "deadline-on"
	kit.TrainJob(t, ns, name, 1, map[string]any{"activeDeadlineSeconds": int64(5)})
	var failed time.Time
	kit.Eventually(t, 2*time.Minute, "the TrainJob fails at its deadline", func() (bool, string) {
		u := kit.GetTrainJob(t, ns, name)
		if u == nil {
			return false, "gone"
		}
		ts, ok := bed.ConditionTrue(u, "Failed")
		failed = ts
		return ok, "no Failed=True condition yet"
	})
	// Both would have acted by now (each requeues at the deadline).
	time.Sleep(5 * time.Second)
	u := kit.GetTrainJob(t, ns, name)
	ts, ok := bed.ConditionTrue(u, "Failed")
	if !ok || !ts.Equal(failed) {
		t.Errorf("the Failed condition changed after it was written: now %v (true %v), was %v", ts, ok, failed)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Failed" && m["reason"] != "DeadlineExceeded" {
			t.Errorf("Failed reason %v, want DeadlineExceeded", m["reason"])
		}
	}
	ws, err := kit.Bed.Writes("trainjobs", ns, name)
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
		t.Errorf("shepherd wrote the TrainJob's status %d times, want at most once:\n%s", byUser[shepherdUser], bed.Lines(ws))
	}
}

// TestInitializerNotGangScheduled: a runtime with a dataset initializer
// gets a Workload of two PodGroup templates — the initializer's basic, the
// trainer's a gang of numNodes — and kube-scheduler treats them so: on two
// one-pod nodes the initializer's pod binds at once while the 4-node
// trainer gang waits whole.
func TestInitializerNotGangScheduled(t *testing.T) {
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "init", bed.Nodes{Count: 2, Pods: 1})
	kit.DeleteWorkloads(t, ns)
	const rt, name, nodes = "torch-initializer", "init", 4
	kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload}, func(u *unstructured.Unstructured) {
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
	kit.TrainJob(t, ns, name, nodes, bed.OnRuntime(rt, bed.RunForeverImage, nodes))

	groupOf := func(p corev1.Pod) string {
		if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
			return *sg.PodGroupName
		}
		return ""
	}
	var initPod *corev1.Pod
	kit.Eventually(t, 2*time.Minute, "the initializer's pod binds while the trainer gang waits", func() (bool, string) {
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
			fmt.Sprintf("%d pods (%d trainers); %s", all, trainers, kit.PodSummary(ns))
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
	if err := kit.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, pg); err != nil {
		t.Fatalf("the initializer's PodGroup %s: %v", group, err)
	}
	policy, _, _ := unstructured.NestedMap(pg.Object, "spec", "schedulingPolicy")
	if _, gang := policy["gang"]; gang || policy["basic"] == nil {
		t.Errorf("the initializer's PodGroup %s has schedulingPolicy %v, want basic", group, policy)
	}
	t.Logf("initializer pod %s bound to %s in PodGroup %s (%v); the 4 trainer pods wait", initPod.Name, initPod.Spec.NodeName, group, policy)
}
