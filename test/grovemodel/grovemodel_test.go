package grovemodel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/grovemodel"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var (
	env *cluster.Cluster
	ctx = context.Background()
)

// TestMain starts one control plane with an audit log of every write, so
// the tests can tell the model's writes by user, and the model beside it.
func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{AuditPolicy: `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`}, &env, func(c *cluster.Cluster) (cluster.Teardown, error) {
		op, err := grovemodel.Start(ctx, c, grovemodel.Options{})
		if err != nil {
			return nil, fmt.Errorf("starting the Grove model: %w", err)
		}
		return cluster.Undo(op.Stop), nil
	})
}

func TestWebhookDefaults(t *testing.T) {
	ns := env.Namespace(t)
	explicit := clique("explicit", 2)
	explicit["spec"].(map[string]any)["minAvailable"] = int64(1)
	explicit["spec"].(map[string]any)["podSpec"].(map[string]any)["restartPolicy"] = "Never"
	pcs := get(t, "PodCliqueSet", ns, createPCS(t, ns, nil, clique("worker", 3), explicit))
	cliques, _, _ := unstructured.NestedSlice(pcs.Object, "spec", "template", "cliques")
	for path, want := range map[string]any{
		"template.terminationDelay":                               "4h0m0s",
		"template.headlessServiceConfig.publishNotReadyAddresses": true,
		"0.podSpec.restartPolicy":                                 "Always",
		"0.podSpec.terminationGracePeriodSeconds":                 int64(30),
		"0.minAvailable":                                          int64(3),
		"1.podSpec.restartPolicy":                                 "Never",
		"1.minAvailable":                                          int64(1),
	} {
		obj, fields := pcs.Object["spec"].(map[string]any), strings.Split(path, ".")
		if fields[0] != "template" {
			obj, fields = cliques[fields[0][0]-'0'].(map[string]any)["spec"].(map[string]any), fields[1:]
		}
		if got, _, _ := unstructured.NestedFieldNoCopy(obj, fields...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	mutated := false
	for _, e := range audit(t, "create", "podcliquesets", ns) {
		called, changed := e.Mutated(grovemodel.WebhookName)
		mutated = mutated || called && changed
	}
	if !mutated {
		t.Errorf("the audit log shows no create mutated by %s", grovemodel.WebhookName)
	}
}

func TestAnnotationsAddedToAPodCliqueGoAtTheNextReconcile(t *testing.T) {
	ns := env.Namespace(t)
	worker := clique("worker", 1)
	worker["annotations"] = map[string]any{"example.com/from-template": "t"}
	name := createPCS(t, ns, nil, worker) + "-0-worker"
	pods := podsOf(t, ns, name, 1, true)
	testkit.Eventually(t, time.Minute, "status.replicas 1, the last change of the start", func() bool {
		n, _, _ := unstructured.NestedInt64(get(t, "PodClique", ns, name).Object, "status", "replicas")
		return n == 1
	})
	time.Sleep(time.Second) // for the reconcile that change causes
	annotate(t, "PodClique", ns, name, "example.com/added", "x")
	time.Sleep(time.Second)
	if a := get(t, "PodClique", ns, name).GetAnnotations(); a["example.com/added"] != "x" {
		t.Fatalf("annotations %v before any reconcile", a)
	}
	// A pod turning ready changes the PodClique's readyReplicas, which
	// wakes the PodCliqueSet controller.
	cluster.SetPodStatus(t, env.Client, &pods[0], ready)
	testkit.Eventually(t, time.Minute, "the PodClique's annotations to be the template's alone", func() bool {
		a := get(t, "PodClique", ns, name).GetAnnotations()
		return len(a) == 1 && a["example.com/from-template"] == "t"
	})
}

func TestDeletedPodIsRecreated(t *testing.T) {
	ns := env.Namespace(t)
	name := createPCS(t, ns, nil, clique("worker", 2)) + "-0-worker"
	pods := podsOf(t, ns, name, 2, false)
	if err := env.Client.Delete(ctx, &pods[0]); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "a pod in place of "+pods[0].Name, func() bool {
		now := podsOf(t, ns, name, 2, false)
		for _, p := range now {
			if p.UID != pods[0].UID && p.UID != pods[1].UID && p.Spec.Hostname == pods[0].Spec.Hostname &&
				p.Labels["grove.io/podclique-pod-index"] == pods[0].Labels["grove.io/podclique-pod-index"] {
				return true
			}
		}
		return false
	})
}

func TestNeverScheduledGangIsBreachedButNotTerminated(t *testing.T) {
	ns := env.Namespace(t)
	pcs := createPCS(t, ns, map[string]any{"terminationDelay": "1s"}, clique("worker", 2))
	name := pcs + "-0-worker"
	pclq := waitBreach(t, ns, name, metav1.ConditionTrue, grovemodel.ReasonScheduledReplicasBelowMinAvailable)
	owned := false
	for _, f := range pclq.GetManagedFields() {
		owned = owned || f.Manager == grovemodel.User && f.Subresource == "status" && strings.Contains(string(f.FieldsV1.Raw), `"f:conditions"`)
	}
	if !owned {
		t.Errorf("field manager %s owns no status.conditions: %v", grovemodel.User, pclq.GetManagedFields())
	}
	testkit.Eventually(t, time.Minute, "a status patch of "+name+" by "+grovemodel.User+" in the audit log", func() bool {
		for _, e := range audit(t, "patch", "podcliques", ns) {
			if e.ObjectRef.Name == name && e.ObjectRef.Subresource == "status" {
				return true
			}
		}
		return false
	})
	// Past terminationDelay, a reconcile (asked for with Grove's trigger
	// annotation; it drops the mark) leaves the never-scheduled gang alone.
	time.Sleep(1500 * time.Millisecond)
	annotate(t, "PodClique", ns, name, "example.com/mark", "x")
	annotate(t, "PodCliqueSet", ns, pcs, "grove.io/reconcile-trigger", "1")
	testkit.Eventually(t, time.Minute, "the reconcile to drop the mark", func() bool {
		return get(t, "PodClique", ns, name).GetAnnotations()["example.com/mark"] == ""
	})
	if got := get(t, "PodClique", ns, name); got.GetUID() != pclq.GetUID() || got.GetDeletionTimestamp() != nil {
		t.Errorf("PodClique %s of a never-scheduled gang was deleted", name)
	}
}

func TestGangTerminationAfterDelay(t *testing.T) {
	ns := env.Namespace(t)
	const delay = 2 * time.Second
	name := createPCS(t, ns, map[string]any{"terminationDelay": delay.String()}, clique("worker", 2)) + "-0-worker"
	pods := podsOf(t, ns, name, 2, true)
	for i := range pods {
		cluster.SetPodStatus(t, env.Client, &pods[i], ready)
	}
	old := waitBreach(t, ns, name, metav1.ConditionFalse, grovemodel.ReasonSufficientReadyPods)
	cluster.SetPodStatus(t, env.Client, &pods[0], func(st *corev1.PodStatus) {
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "busybox", ImageID: "x",
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	})
	breached := condition(t, waitBreach(t, ns, name, metav1.ConditionTrue, grovemodel.ReasonInsufficientReadyPods))
	testkit.Eventually(t, time.Minute, "the PodClique to be deleted and made anew", func() bool { return get(t, "PodClique", ns, name).GetUID() != old.GetUID() })
	var deletes []cluster.AuditEvent
	testkit.Eventually(t, time.Minute, "a deletecollection of podcliques by "+grovemodel.User+" in the audit log", func() bool {
		deletes = audit(t, "deletecollection", "podcliques", ns)
		return len(deletes) > 0
	})
	if after := deletes[0].StageTimestamp.Sub(breached.LastTransitionTime.Time); after < delay {
		t.Errorf("the PodCliques were deleted %v after the breach, before terminationDelay %v", after, delay)
	}
}

// clique is a clique template of replicas pods.
func clique(name string, replicas int64) map[string]any {
	return testkit.Clique(name, replicas, "busybox", nil)
}

// createPCS creates a one-replica PodCliqueSet of cliques, with more
// template fields, and returns its name.
func createPCS(t *testing.T, ns string, template map[string]any, cliques ...map[string]any) string {
	t.Helper()
	u := testkit.PodCliqueSet(ns, "pcs", cliques...).Merge(template, "spec", "template").Obj()
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatalf("creating a PodCliqueSet: %v", err)
	}
	return u.GetName()
}

func named(kind, ns, name string) *unstructured.Unstructured {
	return testkit.Object(api.GroveGroup+"/v1alpha1", kind, ns, name).Obj()
}

// get waits for an object to exist and returns it.
func get(t *testing.T, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := named(kind, ns, name)
	testkit.Eventually(t, time.Minute, kind+" "+name, func() bool { return env.Client.Get(ctx, client.ObjectKeyFromObject(u), u) == nil })
	return u
}

// annotate sets an annotation as another writer (the test's user).
func annotate(t *testing.T, kind, ns, name, key, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if err := env.Client.Patch(ctx, named(kind, ns, name), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("annotating %s %s: %v", kind, name, err)
	}
}

// condition is an object's MinAvailableBreached.
func condition(t *testing.T, u *unstructured.Unstructured) *metav1.Condition {
	t.Helper()
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds := make([]metav1.Condition, len(raw))
	for i, r := range raw {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.(map[string]any), &conds[i]); err != nil {
			t.Fatal(err)
		}
	}
	return meta.FindStatusCondition(conds, grovemodel.CondMinAvailableBreached)
}

// waitBreach waits for a PodClique's MinAvailableBreached and returns the PodClique.
func waitBreach(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) (u *unstructured.Unstructured) {
	t.Helper()
	testkit.Eventually(t, time.Minute, fmt.Sprintf("MinAvailableBreached=%s, %s", status, reason), func() bool {
		u = get(t, "PodClique", ns, name)
		c := condition(t, u)
		return c != nil && c.Status == status && c.Reason == reason
	})
	return u
}

// podsOf waits for n pods of a PodClique, with the PodGang gate lifted if ungated.
func podsOf(t *testing.T, ns, pclq string, n int, ungated bool) (pods []corev1.Pod) {
	t.Helper()
	testkit.Eventually(t, time.Minute, fmt.Sprintf("%d pods of %s", n, pclq), func() bool {
		var l corev1.PodList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"grove.io/podclique": pclq}); err != nil {
			t.Fatal(err)
		}
		pods = l.Items
		for _, p := range pods {
			if ungated && len(p.Spec.SchedulingGates) > 0 {
				return false
			}
		}
		return len(pods) == n
	})
	return pods
}

func ready(st *corev1.PodStatus) {
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

// audit is the completed writes of verb on resource in ns by the model
// (by anyone for creates).
func audit(t *testing.T, verb, resource, ns string) []cluster.AuditEvent {
	t.Helper()
	events, err := cluster.CompletedRequests(env.AuditLog, func(e cluster.AuditEvent) bool {
		return e.Verb == verb && e.ObjectRef.Resource == resource && e.ObjectRef.Namespace == ns && e.OK() &&
			(verb == "create" || e.User.Username == grovemodel.User)
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}
