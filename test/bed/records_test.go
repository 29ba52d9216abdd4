package bed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var (
	pcsGVK    = schema.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	pclqGVK   = schema.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodClique"}
	recordGVR = shepherdv1alpha1.GroupVersion.WithResource("workloadrecords")
)

// trainingSetObject is an annotation-only Training PodCliqueSet for the
// Grove model: one replica, one clique "worker" of workers pods, with the
// given knob annotations besides the workload type.
func trainingSetObject(ns, name string, workers int64, knobs map[string]string) *unstructured.Unstructured {
	annotations := map[string]string{api.AnnotationWorkloadType: "Training"}
	for k, v := range knobs {
		annotations[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"cliques": []any{map[string]any{
			"name": "worker",
			"spec": map[string]any{"roleName": "worker", "replicas": workers, "podSpec": map[string]any{
				"containers": []any{map[string]any{"name": "worker", "image": "docker.io/train"}},
			}},
		}}}},
	}}
	u.SetGroupVersionKind(pcsGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(annotations)
	return u
}

// trainingSet creates trainingSetObject.
func trainingSet(t *testing.T, ns, name string, workers int64, knobs map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := trainingSetObject(ns, name, workers, knobs)
	if err := kit.Cluster.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating PodCliqueSet %s: %v", name, err)
	}
	return u
}

// record reads shepherd's record of a workload (nil: none).
func record(t *testing.T, ns, kind, name string) *shepherdv1alpha1.WorkloadRecord {
	t.Helper()
	rec, err := cluster.Record(context.Background(), kit.Cluster.Client, ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitRecord waits until the record of a workload satisfies ok.
func waitRecord(t *testing.T, within time.Duration, ns, kind, name, what string, ok func(*shepherdv1alpha1.WorkloadRecord) bool) *shepherdv1alpha1.WorkloadRecord {
	t.Helper()
	var rec *shepherdv1alpha1.WorkloadRecord
	kit.Eventually(t, within, fmt.Sprintf("%s %s: %s", kind, name, what), func() (bool, string) {
		rec = record(t, ns, kind, name)
		if rec == nil {
			return false, "no record"
		}
		return ok(rec), fmt.Sprintf("%+v", rec.Status)
	})
	return rec
}

func setPods(t *testing.T, ns, set string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := kit.Cluster.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{api.LabelPartOf: set}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// runningReady waits until n pods of a set are Running and Ready.
func runningReady(t *testing.T, ns, set string, n int) {
	t.Helper()
	kit.Eventually(t, time.Minute, fmt.Sprintf("%d pods of %s Running and Ready", n, set), func() (bool, string) {
		ready := 0
		for _, p := range setPods(t, ns, set) {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready == n, fmt.Sprintf("%d ready", ready)
	})
}

// TestTrainingFailsThroughItsOwner (issue 30, item 3): a Training set whose
// maxRuntime passes ends with its pods gone and none recreated by Grove:
// shepherd scales its PodCliques to 0 (Grove keeps an existing PodClique's
// replicas) and deletes no pod itself; pod deletes ≤ the pods that
// existed, pod creates after the failure 0, all within 10 s.
func TestTrainingFailsThroughItsOwner(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "fail", bed.Nodes{Count: 2})
	kit.DeleteWorkloads(t, ns)
	const name, workers = "fails", 2
	trainingSet(t, ns, name, workers, map[string]string{api.AnnotationMaxRuntime: "6s"})
	runningReady(t, ns, name, workers)
	existed := len(setPods(t, ns, name))

	rec := waitRecord(t, time.Minute, ns, api.KindPodCliqueSet, name, "Failed/MaxRuntimeExceeded", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return r.Status.Phase == shepherdv1alpha1.PhaseFailed && r.Status.Reason == api.ReasonMaxRuntimeExceeded
	})
	failedAt := rec.Status.Conditions[0].LastTransitionTime.Time
	kit.Eventually(t, 10*time.Second, "every pod of the failed set gone", func() (bool, string) {
		left := setPods(t, ns, name)
		return len(left) == 0, fmt.Sprintf("%d pods left", len(left))
	})
	// Quiet for a while: nothing comes back.
	time.Sleep(3 * time.Second)
	if left := setPods(t, ns, name); len(left) != 0 {
		t.Errorf("%d pods of the failed set are back", len(left))
	}

	ws, err := kit.Bed.Writes("pods", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	// A pod delete is a controller's request to delete a pod; kwok, the
	// kubelet here, then removes the terminated pod (a second delete of
	// the same pod, which is not counted).
	deleted, creates := map[string]string{}, 0
	for _, w := range ws {
		switch {
		case w.Verb == "delete" && w.OK() && w.User.Username != bed.KwokUser:
			deleted[w.ObjectRef.Name] = w.User.Username
			if w.User.Username == shepherdUser {
				t.Errorf("shepherd deleted pod %s itself: Grove owns the pods of a PodClique", w.ObjectRef.Name)
			}
		case w.Verb == "create" && w.OK() && w.StageTimestamp.After(failedAt.Add(time.Second)):
			creates++
		}
	}
	deletes := len(deleted)
	t.Logf("pods that existed %d; pods deleted %d (by %v); pod creates after Failed %d", existed, deletes, deleted, creates)
	if deletes > existed {
		t.Errorf("%d pod deletes, want at most the %d pods that existed", deletes, existed)
	}
	if creates != 0 {
		t.Errorf("%d pods created after the set failed, want 0", creates)
	}
	var cliques unstructured.UnstructuredList
	cliques.SetGroupVersionKind(pclqGVK)
	if err := kit.Cluster.Client.List(ctx, &cliques, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cliques.Items {
		if r, _, _ := unstructured.NestedInt64(c.Object, "spec", "replicas"); r != 0 {
			t.Errorf("PodClique %s has %d replicas, want 0", c.GetName(), r)
		}
	}
	pcsWrites, err := kit.Bed.Writes("podcliquesets", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(pcsWrites, shepherdUser); len(mine) > 0 {
		t.Errorf("shepherd wrote the PodCliqueSet %d times, want 0:\n%s", len(mine), bed.Lines(mine))
	}
}

// TestPodCliqueAnnotationsRewrittenLoseNothing (issue 30, item 2): Grove
// replaces a PodClique's annotations with its template's on every
// reconcile. Across 100 such rewrites shepherd keeps what it needs — the
// cliques' wasAvailable and the set's phase and start time, in its record —
// and a lost worker afterwards is still a breach of an available gang: the
// set is restarted once (restartCount 1), not judged never available.
func TestPodCliqueAnnotationsRewrittenLoseNothing(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "rewrite", bed.Nodes{Count: 2})
	kit.DeleteWorkloads(t, ns)
	const name, workers = "rewritten", 2
	trainingSet(t, ns, name, workers, map[string]string{api.AnnotationMaxRestarts: "1"})
	runningReady(t, ns, name, workers)
	clique := name + "-0-worker"
	before := waitRecord(t, 30*time.Second, ns, api.KindPodCliqueSet, name, "Running, the clique available", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return r.Status.Phase == shepherdv1alpha1.PhaseRunning && len(r.Status.Cliques) == 1 && r.Status.Cliques[0].WasAvailable
	})

	pclq := &unstructured.Unstructured{}
	pclq.SetGroupVersionKind(pclqGVK)
	for i := range 100 {
		// What Grove's buildResource does: the annotations are the
		// template's, whatever another writer put there.
		body := fmt.Sprintf(`{"metadata":{"annotations":{"grove.io/rewrite":"%d"}}}`, i)
		pclq.SetNamespace(ns)
		pclq.SetName(clique)
		if err := kit.Cluster.Client.Patch(ctx, pclq, client.RawPatch("application/merge-patch+json", []byte(body))); err != nil {
			t.Fatal(err)
		}
		if err := kit.Cluster.Client.Patch(ctx, pclq, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":null}}`))); err != nil {
			t.Fatal(err)
		}
	}
	after := record(t, ns, api.KindPodCliqueSet, name)
	if after == nil || !after.Status.Cliques[0].WasAvailable || after.Status.Phase != shepherdv1alpha1.PhaseRunning ||
		!after.Status.StartTime.Equal(before.Status.StartTime) || ptr.Deref(after.Status.RestartCount, -1) != 0 {
		t.Fatalf("after 100 rewrites of the PodClique's annotations the record is %+v, want it as before: %+v", after, before.Status)
	}

	lost := setPods(t, ns, name)[0]
	if err := kit.Cluster.Client.Delete(ctx, &lost); err != nil {
		t.Fatal(err)
	}
	restarted := waitRecord(t, time.Minute, ns, api.KindPodCliqueSet, name, "restartCount 1", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return ptr.Deref(r.Status.RestartCount, 0) == 1
	})
	if restarted.Status.Phase != shepherdv1alpha1.PhaseRunning {
		t.Errorf("phase %s after the restart, want Running", restarted.Status.Phase)
	}
	runningReady(t, ns, name, workers)
	ws, err := kit.Bed.Writes("podcliques", ns, clique)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(ws, shepherdUser); len(mine) > 0 {
		t.Errorf("shepherd wrote the Training PodClique %d times, want 0:\n%s", len(mine), bed.Lines(mine))
	}
}

// table lists the records of ns as kubectl get -o wide does: the
// server-side Table with the CRD's printer columns, as column name → cell
// per record name.
func table(t *testing.T, ns string) map[string]map[string]string {
	t.Helper()
	cfg := rest.CopyConfig(kit.Cluster.Config)
	cfg.GroupVersion = &shepherdv1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rc.Get().Namespace(ns).Resource(recordGVR.Resource).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(raw, &tbl); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, row := range tbl.Rows {
		cells := map[string]string{}
		for i, col := range tbl.ColumnDefinitions { // -o wide's too
			cells[col.Name] = fmt.Sprint(row.Cells[i])
		}
		out[cells["Name"]] = cells
	}
	return out
}

// TestWorkloadRecordsList (issue 30): `kubectl get workloadrecords` lists a
// running, a failed and a finished workload, each with its kind, phase,
// restarts, deadline (and who enforces it) and TTL.
func TestWorkloadRecordsList(t *testing.T) {
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "list", bed.Nodes{Count: 2})
	kit.DeleteWorkloads(t, ns)
	const rt = "torch-list"
	kit.RuntimeCopy(t, rt, map[string]string{api.AnnotationTTLSecondsAfterFinished: "3600"})
	// Finished: runs to completion on the kwok nodes.
	kit.TrainJob(t, ns, "done", 1, bed.OnRuntime(rt, "docker.io/torch-run", 1))
	// Running: its pod runs until deleted, under a deadline Trainer
	// enforces (auto).
	running := bed.OnRuntime(rt, bed.RunForeverImage, 1)
	running["activeDeadlineSeconds"] = int64(3600)
	kit.TrainJob(t, ns, "waiting", 1, running)
	// Failed: a Training set past its maxRuntime.
	trainingSet(t, ns, "short", 1, map[string]string{api.AnnotationMaxRuntime: "3s"})

	waitRecord(t, 2*time.Minute, ns, api.KindTrainJob, "done", "Succeeded with its TTL due", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return r.Status.Phase == shepherdv1alpha1.PhaseSucceeded && r.Status.TTL != nil && r.Status.TTL.DueTime != nil
	})
	waitRecord(t, time.Minute, ns, api.KindTrainJob, "waiting", "Running with its deadline", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return r.Status.Phase == shepherdv1alpha1.PhaseRunning && r.Status.Deadline != nil && r.Status.Deadline.DueTime != nil
	})
	waitRecord(t, time.Minute, ns, api.KindPodCliqueSet, "short", "Failed", func(r *shepherdv1alpha1.WorkloadRecord) bool {
		return r.Status.Phase == shepherdv1alpha1.PhaseFailed
	})

	rows := table(t, ns)
	for name, want := range map[string]map[string]string{
		"trainjob-done":      {"Kind": "TrainJob", "Workload": "done", "Phase": "Succeeded", "Deadline": "<nil>"},
		"trainjob-waiting":   {"Kind": "TrainJob", "Workload": "waiting", "Phase": "Running", "Deadline-By": "Trainer", "TTL": "<nil>"},
		"podcliqueset-short": {"Kind": "PodCliqueSet", "Workload": "short", "Phase": "Failed", "Restarts": "0", "Reason": api.ReasonMaxRuntimeExceeded},
	} {
		got, ok := rows[name]
		if !ok {
			t.Errorf("no row %s in %v", name, rows)
			continue
		}
		for col, v := range want {
			if got[col] != v {
				t.Errorf("%s: column %s = %q, want %q (row %v)", name, col, got[col], v, got)
			}
		}
	}
	if ttl := rows["trainjob-done"]["TTL"]; !strings.Contains(ttl, "T") {
		t.Errorf("trainjob-done: TTL column %q, want the due time", ttl)
	}
	if d := rows["trainjob-waiting"]["Deadline"]; !strings.Contains(d, "T") {
		t.Errorf("trainjob-waiting: Deadline column %q, want the due time", d)
	}
	var names []string
	for n := range rows {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("rows: %v", names)
}
