// Package trainjob tests shepherd's TrainJob deadline and TTL (R-TJ,
// KEP-2899) beside the real operators: the test bed's Trainer v2.3.0 and
// JobSet v0.12.0 controllers with their webhooks, kube-controller-manager's
// garbage collector and Job controller, kube-scheduler and kwok nodes whose
// pods run and complete (test/bed), and `shepherd serve` as its
// ServiceAccount with the shipped RBAC. No test writes a TrainJob's status
// or a JobSet: Trainer does, as on a cluster.
//
// serve runs with the deadline set on. Trainer v2.3.0 enforces
// activeDeadlineSeconds too (in auto, shepherd stands down; test/bed shows
// that), so where a test is about what shepherd does, it pauses Trainer's
// process (SIGSTOP) just before the deadline — Trainer lagging behind — and
// reads from the apiserver's audit log that the writes were shepherd's,
// then lets Trainer go on and checks that nothing is written twice. The
// decision's every branch is table-tested in integrations/trainer/trainjob; this suite
// tests the loop among the real parts. Tests that pause Trainer (which
// pauses its webhooks for everyone) or restart serve run one at a time;
// the others run in parallel after them. Deadlines and TTLs are a few
// seconds of real time and assertions read object state and the
// conditions' own timestamps, never durations of the test.
package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var kit *bed.Suite

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{}, nil, bed.Setup(bed.SuiteOptions{ServeArgs: []string{"--feature=trainjob-deadline=on"}}, &kit))
}

// within bounds every wait: generous, the machine is shared.
const within = 2 * time.Minute

// shepherdUser is serve's identity in the audit log.
var shepherdUser = cluster.ShepherdUser

// start gives the test a namespace and n kwok nodes, and deletes its
// workloads when it ends.
func start(t *testing.T, nodes int) string {
	t.Helper()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, ns, bed.Nodes{Count: nodes})
	kit.DeleteWorkloads(t, ns)
	return ns
}

// running creates a TrainJob of one node on the torch runtime, whose pod
// runs until deleted, and waits until its pod runs.
func running(t *testing.T, ns, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := kit.TrainJob(t, ns, name, 1, spec)
	kit.WaitJobSet(t, ns, name)
	waitPodsRunning(t, ns, 1)
	return u
}

// waitPodsRunning waits until n pods of ns are Running.
func waitPodsRunning(t *testing.T, ns string, n int) {
	t.Helper()
	kit.Eventually(t, within, fmt.Sprintf("%d pods Running", n), func() (bool, string) {
		return countPods(t, ns, "Running") == n, kit.PodSummary(ns)
	})
}

// waitSuspended waits until Trainer reports the TrainJob's Suspended
// condition with status and reason, and returns it.
func waitSuspended(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	kit.Eventually(t, within, fmt.Sprintf("Trainer reports Suspended=%s (%s)", status, reason), func() (bool, string) {
		u := kit.GetTrainJob(t, ns, name)
		if u == nil {
			return false, "the TrainJob is gone"
		}
		c := bed.Condition(u, "Suspended")
		if c == nil {
			return false, "no Suspended condition"
		}
		got = *c
		return c.Status == status && c.Reason == reason, fmt.Sprintf("Suspended=%s (%s)", c.Status, c.Reason)
	})
	return got
}

// notFailed checks the TrainJob has no Failed=True condition.
func notFailed(t *testing.T, ns, name string) func() (bool, string) {
	return func() (bool, string) {
		u := kit.GetTrainJob(t, ns, name)
		if u == nil {
			return false, "the TrainJob is gone"
		}
		if c := bed.Condition(u, "Failed"); c != nil && c.Status == metav1.ConditionTrue {
			return false, fmt.Sprintf("Failed=True %s: %s", c.Reason, c.Message)
		}
		return true, ""
	}
}

// exists checks the TrainJob is there (with the given UID, if any).
func exists(t *testing.T, ns, name, uid string) func() (bool, string) {
	return func() (bool, string) {
		u := kit.GetTrainJob(t, ns, name)
		if u == nil {
			return false, "the TrainJob is gone"
		}
		if uid != "" && string(u.GetUID()) != uid {
			return false, fmt.Sprintf("the TrainJob has UID %s, want %s", u.GetUID(), uid)
		}
		return true, ""
	}
}

// deletesBy are user's successful deletes of the named object.
func deletesBy(t *testing.T, resource, ns, name, user string) []bed.Write {
	t.Helper()
	var out []bed.Write
	for _, w := range kit.SuccessfulWrites(t, resource, ns, name, user, "") {
		if w.Verb == "delete" {
			out = append(out, w)
		}
	}
	return out
}

// countPods counts the pods of ns in phase.
func countPods(t *testing.T, ns, phase string) int {
	t.Helper()
	var pods unstructured.UnstructuredList
	pods.SetAPIVersion("v1")
	pods.SetKind("PodList")
	if err := kit.Cluster.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if ph, _, _ := unstructured.NestedString(p.Object, "status", "phase"); ph == phase {
			n++
		}
	}
	return n
}

// ttlRuntime copies Trainer's torch runtime as name with the TTL carrier
// holding ttl ("" for none).
func ttlRuntime(t *testing.T, name, ttl string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	var annotations map[string]string
	if ttl != "" {
		annotations = map[string]string{api.AnnotationTTLSecondsAfterFinished: ttl}
	}
	return kit.RuntimeCopy(t, name, annotations, mutate...)
}

// setTTL sets the runtime's TTL carrier, as its admin does.
func setTTL(t *testing.T, rt *unstructured.Unstructured, ttl string) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.AnnotationTTLSecondsAfterFinished, ttl))
	if err := kit.Cluster.Client.Patch(context.Background(), rt.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("setting the TTL of runtime %s to %q: %v", rt.GetName(), ttl, err)
	}
}
