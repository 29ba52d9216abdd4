package bed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// shepherdUser is serve's client identity: shepherd's ServiceAccount,
// bound by exactly the RBAC deploy/default ships (cluster.Serve).
var shepherdUser = cluster.ShepherdUser

// kit is the package's suite: the bed with gang scheduling, the Grove
// model and shepherd installed.
var kit *bed.Suite

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{}, nil, bed.Setup(bed.SuiteOptions{WorkloadAPI: cluster.WorkloadAPIV1beta1, GenericWorkload: true, Grove: true}, &kit))
}

var (
	trainJobGVK = bed.TrainJobGVK
	jobSetGVK   = bed.JobSetGVK
)

// TestTrainJobRunsThroughTheRealChain: a TrainJob on Trainer's torch runtime
// makes Trainer create its JobSet, the JobSet controller create its Job, and
// kube-controller-manager's Job controller create the Pods — each written by
// that component's own identity (the audit log says who).
func TestTrainJobRunsThroughTheRealChain(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.DeleteWorkloads(t, ns)
	const name, nodes = "chain", 2
	kit.TrainJob(t, ns, name, nodes, nil)
	kit.WaitJobSet(t, ns, name)

	var jobs batchv1.JobList
	kit.Eventually(t, 2*time.Minute, "the JobSet controller creates the JobSet's Jobs", func() (bool, string) {
		if err := kit.Cluster.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, j := range jobs.Items {
			if bed.OwnedBy(&j, "JobSet", name) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Jobs, none owned by JobSet %s", len(jobs.Items), name)
	})
	var pods corev1.PodList
	kit.Eventually(t, 2*time.Minute, fmt.Sprintf("kube-controller-manager creates the %d Pods", nodes), func() (bool, string) {
		if err := kit.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range pods.Items {
			for _, j := range jobs.Items {
				if bed.OwnedBy(&p, "Job", j.Name) {
					n++
				}
			}
		}
		return n == nodes, fmt.Sprintf("%d of %d Pods owned by the JobSet's Jobs", n, len(pods.Items))
	})
	// JobSet's pod webhook (configuration jobset-mutating-webhook-configuration,
	// objectSelector jobset-name) was called on each pod create.
	ws, err := kit.Bed.Writes("pods", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	called := 0
	for _, w := range ws {
		if w.Verb == "create" && w.OK() {
			if ok, _ := w.Mutated("mpod.kb.io"); ok {
				called++
			}
		}
	}
	if called != nodes {
		t.Errorf("JobSet's pod webhook mpod.kb.io called on %d pod creates, want %d:\n%s", called, nodes, bed.Lines(ws))
	}

	for resource, want := range map[string]string{"jobsets": bed.TrainerUser, "jobs": bed.JobSetUser, "pods": bed.KCMUser} {
		got := kit.Creators(t, resource, ns)
		if len(got) != 1 || got[want] == 0 {
			t.Errorf("%s in %s created by %v, want by %s only", resource, ns, got, want)
		}
	}
}

// TestNoVJS5OnTrainerJobSets: every JobSet Trainer creates passes JobSet's
// defaulting webhook (which writes startupPolicy AnyOrder) before shepherd's
// validating webhook judges it (validation follows every mutation), and
// shepherd must not warn of V-JS-5 (InOrder is deprecated) on it. A JobSet shepherd denies (V-JS-4) in
// the same namespace afterwards shows its Events arrive.
func TestNoVJS5OnTrainerJobSets(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.DeleteWorkloads(t, ns)
	before := jobSetCreates(t)
	for _, name := range []string{"warnless-a", "warnless-b"} {
		kit.TrainJob(t, ns, name, 1, nil)
	}
	for _, name := range []string{"warnless-a", "warnless-b"} {
		js := kit.WaitJobSet(t, ns, name)
		order, _, _ := unstructured.NestedString(js.Object, "spec", "startupPolicy", "startupPolicyOrder")
		t.Logf("JobSet %s: startupPolicyOrder %q (JobSet's webhook defaults it)", name, order)
	}
	// shepherd's validating webhook judged them (serve runs in this process).
	if n := jobSetCreates(t) - before; n < 2 {
		t.Errorf("shepherd's validating webhook answered %v JobSet CREATEs, want at least Trainer's 2", n)
	}

	// The positive control: shepherd's Events for this namespace flow.
	control := &unstructured.Unstructured{}
	control.SetGroupVersionKind(jobSetGVK)
	control.SetNamespace(ns)
	control.SetName("control")
	pod := map[string]any{"template": map[string]any{"spec": map[string]any{
		"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}
	control.Object["spec"] = map[string]any{"replicatedJobs": []any{
		map[string]any{"name": "first", "dependsOn": []any{map[string]any{"name": "second", "status": "Ready"}}, "template": map[string]any{"spec": pod}},
		map[string]any{"name": "second", "template": map[string]any{"spec": pod}},
	}}
	// JobSet's own validator may answer first; shepherd's verdict is its Event.
	err := kit.Cluster.Client.Create(ctx, control)
	if err == nil {
		t.Fatal("a JobSet whose first replicatedJob depends on another was admitted")
	}
	t.Logf("control JobSet denied: %v", err)
	var notes []string
	kit.Eventually(t, time.Minute, "shepherd's V-JS-4 Event for the control JobSet", func() (bool, string) {
		var evs eventsv1.EventList
		if err := kit.Cluster.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		notes = notes[:0]
		found := false
		for _, e := range evs.Items {
			if e.Reason != "PolicyViolation" {
				continue
			}
			notes = append(notes, e.Regarding.Kind+"/"+e.Regarding.Name+": "+e.Note)
			found = found || strings.HasPrefix(e.Note, "V-JS-4 ")
		}
		return found, fmt.Sprintf("PolicyViolation Events: %q", notes)
	})
	for _, n := range notes {
		if strings.Contains(n, "V-JS-5") {
			t.Errorf("shepherd warned of V-JS-5 on a JobSet Trainer created: %s", n)
		}
	}
}

// TestDeadlineAutoTrainerAlone: in auto mode (serve's default) the TrainJob
// CRD has spec.activeDeadlineSeconds, so Trainer enforces the deadline and
// shepherd stands down: the TrainJob is failed by Trainer (reason
// DeadlineExceeded, one transition) and shepherd's user writes nothing to it
// or its status.
func TestDeadlineAutoTrainerAlone(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.DeleteWorkloads(t, ns)
	const name = "deadline"
	kit.TrainJob(t, ns, name, 1, map[string]any{"activeDeadlineSeconds": int64(5)})
	created := time.Now()

	failed := func() (metav1.Condition, bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(trainJobGVK)
		if err := kit.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return metav1.Condition{}, false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Failed" && m["status"] == "True" {
				ts, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
				return metav1.Condition{Type: "Failed", Reason: fmt.Sprint(m["reason"]), Message: fmt.Sprint(m["message"]),
					LastTransitionTime: metav1.NewTime(ts)}, true, nil
			}
		}
		return metav1.Condition{}, false, nil
	}
	var cond metav1.Condition
	kit.Eventually(t, 2*time.Minute, "Trainer fails the TrainJob at its deadline", func() (bool, string) {
		c, ok, err := failed()
		if err != nil {
			return false, err.Error()
		}
		cond = c
		return ok, "no Failed=True condition yet"
	})
	t.Logf("Failed %s after %v: %s", cond.Reason, time.Since(created).Round(time.Second), cond.Message)
	if cond.Reason != "DeadlineExceeded" {
		t.Errorf("Failed reason %q, want DeadlineExceeded", cond.Reason)
	}
	// Give shepherd's reconciler time to act if it were going to (it
	// requeues at the deadline), then read who wrote the TrainJob.
	time.Sleep(5 * time.Second)
	if c, ok, err := failed(); err != nil || !ok || !c.LastTransitionTime.Equal(&cond.LastTransitionTime) {
		t.Errorf("the Failed condition changed: %+v (ok %v, err %v), was %+v", c, ok, err, cond)
	}
	ws, err := kit.Bed.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(ws, shepherdUser); len(mine) > 0 {
		t.Errorf("shepherd wrote the TrainJob %d times in auto mode, want 0:\n%s", len(mine), bed.Lines(mine))
	}
	trainer := 0
	for _, w := range bed.By(ws, bed.TrainerUser) {
		if w.OK() && w.ObjectRef.Subresource == "status" {
			trainer++
		}
	}
	if trainer == 0 {
		t.Errorf("no status write by %s in the audit log:\n%s", bed.TrainerUser, bed.Lines(ws))
	}
	t.Logf("writes to TrainJob %s: %d (status by Trainer: %d, by shepherd: 0)", name, len(ws), trainer)
}

// jobSetCreates is how many JobSet CREATEs shepherd's validating webhook
// has answered.
func jobSetCreates(t testing.TB) float64 {
	return admissionRequests(t, map[string]string{"webhook": "validating", "kind": "JobSet", "operation": "CREATE"})
}

// admissionRequests sums shepherd_admission_requests_total of the serve
// running in this process over the series whose labels include want (all
// of them for an empty want).
func admissionRequests(t testing.TB, want map[string]string) float64 {
	t.Helper()
	n, err := cluster.Metric("shepherd_admission_requests_total", want)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
