package bed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The builders and waits the suites share: workloads are unstructured, in
// the shape the upstream CRDs serve, so that no suite depends on a Go type
// set of its own for them.

// Eventually is testkit.Eventually that fails at once when a component of
// the bed has exited.
func (s *Suite) Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testkit.Eventually(t, within, what, s.whileUp(cond))
}

// Consistently is testkit.Consistently that fails at once when a component
// of the bed has exited.
func (s *Suite) Consistently(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testkit.Consistently(t, within, what, s.whileUp(cond))
}

// whileUp is cond, stopping the wait when a component of the bed has
// exited: no state awaited from the bed can come then.
func (s *Suite) whileUp(cond func() (bool, string)) func() (bool, error) {
	return func() (bool, error) {
		if gone := s.Bed.Exited(); len(gone) > 0 {
			return false, testkit.Stop(fmt.Errorf("test bed components exited: %v", gone))
		}
		ok, seen := cond()
		if !ok {
			return false, errors.New(seen)
		}
		return true, nil
	}
}

// TrainJobObject is a TrainJob on the torch runtime with numNodes nodes
// and the given spec fields on top; its pods run until deleted
// (RunForeverImage) unless spec gives a trainer of its own.
func TrainJobObject(ns, name string, numNodes int64, spec map[string]any) *unstructured.Unstructured {
	return testkit.TrainJob(ns, name, TorchRuntime, 0).Set(numNodes, "spec", "trainer", "numNodes").Image(RunForeverImage).
		Merge(spec, "spec").Obj()
}

// OnRuntime is a TrainJob spec on the named runtime of kind
// ClusterTrainingRuntime.
func OnRuntime(name, image string, numNodes int64) map[string]any {
	return map[string]any{
		"runtimeRef": map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": name},
		"trainer":    map[string]any{"image": image, "numNodes": numNodes},
	}
}

// TrainJob creates TrainJobObject(ns, name, numNodes, spec).
func (s *Suite) TrainJob(t testing.TB, ns, name string, numNodes int64, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	return s.CreateTrainJob(t, TrainJobObject(ns, name, numNodes, spec))
}

// CreateTrainJob creates u. Trainer's validating webhook looks the runtime
// up in its informer cache, which may not have seen a runtime the test
// created a moment before: its "must be created before the TrainJob" is
// retried briefly.
func (s *Suite) CreateTrainJob(t testing.TB, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var created *unstructured.Unstructured
	if err := testkit.Poll(250*time.Millisecond, 15*time.Second, func() error {
		created = u.DeepCopy()
		err := s.Cluster.Client.Create(context.Background(), created)
		if err != nil && !strings.Contains(err.Error(), "must be created before the TrainJob is created") {
			return testkit.Stop(err)
		}
		return err
	}); err != nil {
		t.Fatalf("creating TrainJob %s/%s: %v", u.GetNamespace(), u.GetName(), err)
	}
	return created
}

// RuntimeCopy creates ClusterTrainingRuntime name: Trainer's torch runtime
// with the given annotations (shepherd's carriers), deleted when the test
// ends.
func (s *Suite) RuntimeCopy(t testing.TB, name string, annotations map[string]string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	return s.RuntimeCopyOf(t, "torch_distributed.yaml", name, annotations, mutate...)
}

// RuntimeCopyOf is RuntimeCopy of another runtime Trainer ships (file of
// its manifests/base/runtimes).
func (s *Suite) RuntimeCopyOf(t testing.TB, file, name string, annotations map[string]string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	u, err := TrainerRuntime(file)
	if err != nil {
		t.Fatal(err)
	}
	u.SetName(name)
	u.SetAnnotations(annotations)
	u.SetLabels(nil)
	for _, m := range mutate {
		m(u)
	}
	if err := s.Cluster.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), name, err)
	}
	t.Cleanup(func() {
		if err := s.Cluster.Client.Delete(context.Background(), u); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s: %v", u.GetKind(), name, err)
		}
	})
	return u
}

// Namespaced makes a runtime copy a TrainingRuntime in ns (a RuntimeCopy
// mutation).
func Namespaced(ns string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		u.SetGroupVersionKind(RuntimeGVK)
		u.SetNamespace(ns)
	}
}

// WorkloadKinds are the kinds DeleteWorkloads deletes.
var WorkloadKinds = []schema.GroupVersionKind{
	TrainJobGVK, JobSetGVK,
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"},
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueScalingGroup"},
	{Group: "grove.io", Version: "v1alpha1", Kind: "PodClique"},
}

// DeleteWorkloads deletes the test's TrainJobs, JobSets and Grove objects
// when it ends and waits until their pods are gone, so the nodes a later
// test adds get none of them (register it after AddNodes: cleanups run
// last first).
func (s *Suite) DeleteWorkloads(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, gvk := range WorkloadKinds {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := s.Cluster.Client.DeleteAllOf(ctx, u, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %ss in %s: %v", gvk.Kind, ns, err)
			}
		}
		if err := testkit.Poll(250*time.Millisecond, time.Minute, func() (bool, error) {
			var pods corev1.PodList
			if err := s.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				return false, err
			}
			var left []string
			for _, p := range pods.Items {
				left = append(left, fmt.Sprintf("%s (node %q, deleted %v, finalizers %v, owners %v)", p.Name, p.Spec.NodeName, p.DeletionTimestamp, p.Finalizers, p.OwnerReferences))
			}
			if len(left) > 0 {
				return false, fmt.Errorf("pods left: %v", left)
			}
			return true, nil
		}); err != nil {
			t.Errorf("the pods of %s were not gone after their workloads were deleted: %v", ns, err)
		}
	})
}

// GetTrainJob reads a TrainJob; nil when it does not exist.
func (s *Suite) GetTrainJob(t testing.TB, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(TrainJobGVK)
	err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Condition is condition typ of u's status, nil without one.
func Condition(u *unstructured.Unstructured, typ string) *metav1.Condition {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		ts, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
		str := func(k string) string { v, _ := m[k].(string); return v }
		return &metav1.Condition{Type: typ, Status: metav1.ConditionStatus(str("status")), Reason: str("reason"),
			Message: str("message"), LastTransitionTime: metav1.NewTime(ts)}
	}
	return nil
}

// ConditionTrue is the lastTransitionTime of condition typ when it is True.
func ConditionTrue(u *unstructured.Unstructured, typ string) (time.Time, bool) {
	if c := Condition(u, typ); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time, true
	}
	return time.Time{}, false
}

// WaitCondition waits until TrainJob name has condition typ True and
// returns it.
func (s *Suite) WaitCondition(t testing.TB, ns, name, typ string, within time.Duration) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	s.Eventually(t, within, fmt.Sprintf("TrainJob %s has %s=True", name, typ), func() (bool, string) {
		u := s.GetTrainJob(t, ns, name)
		if u == nil {
			return false, "the TrainJob is gone"
		}
		c := Condition(u, typ)
		if c != nil {
			got = *c
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("conditions %v; pods %s", conds, s.PodSummary(ns))
	})
	return got
}

// WaitComplete waits until Trainer marks the TrainJob Complete and returns
// when it did.
func (s *Suite) WaitComplete(t testing.TB, ns, name string, within time.Duration) time.Time {
	t.Helper()
	return s.WaitCondition(t, ns, name, "Complete", within).LastTransitionTime.Time
}

// PodSummary is each pod of ns: its phase, node and scheduling condition.
func (s *Suite) PodSummary(ns string) string {
	var pods corev1.PodList
	if err := s.Cluster.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
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

// OwnedBy reports whether obj's controller is the named kind and name.
func OwnedBy(obj metav1.Object, kind, name string) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == kind && o.Name == name && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// WaitJobSet waits for the JobSet Trainer creates for TrainJob name.
func (s *Suite) WaitJobSet(t testing.TB, ns, name string) *unstructured.Unstructured {
	t.Helper()
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(JobSetGVK)
	s.Eventually(t, 2*time.Minute, "Trainer creates the JobSet of TrainJob "+name, func() (bool, string) {
		if err := s.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, js); err != nil {
			return false, err.Error()
		}
		return OwnedBy(js, "TrainJob", name), fmt.Sprintf("owners %v", js.GetOwnerReferences())
	})
	return js
}

// Creators are the users whose writes created objects of resource in ns:
// a create, or a server-side apply (a patch) answered 201 Created.
func (s *Suite) Creators(t testing.TB, resource, ns string) map[string]int {
	t.Helper()
	ws, err := s.Bed.Writes(resource, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, w := range ws {
		if w.ResponseStatus != nil && w.ResponseStatus.Code == http.StatusCreated && w.ObjectRef.Subresource == "" {
			n[w.User.Username]++
		}
	}
	return n
}

// SetSuspend sets TrainJob name's spec.suspend, as its user (or Kueue)
// does.
func (s *Suite) SetSuspend(t testing.TB, ns, name string, suspend bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(TrainJobGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	patch := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
	if err := s.Cluster.Client.Patch(context.Background(), u, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("setting spec.suspend=%t on TrainJob %s/%s: %v", suspend, ns, name, err)
	}
}

// SuccessfulWrites are the writes user made, and the apiserver carried
// out, to the named object of resource: subresource "status" for its
// status, "" for the object itself.
func (s *Suite) SuccessfulWrites(t testing.TB, resource, ns, name, user, subresource string) []Write {
	t.Helper()
	ws, err := s.Bed.Writes(resource, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var out []Write
	for _, w := range By(ws, user) {
		if w.OK() && w.ObjectRef.Subresource == subresource {
			out = append(out, w)
		}
	}
	return out
}

// Lines is ws, one write per line, for failure messages.
func Lines(ws []Write) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(w.String() + "\n")
	}
	return b.String()
}

// TTLDeletion waits until TrainJob name is gone and returns the audit
// record of the delete that took it, failing unless exactly one user
// deleted it and that user is shepherd.
func (s *Suite) TTLDeletion(t testing.TB, ns, name string, within time.Duration) Write {
	t.Helper()
	s.Eventually(t, within, "TrainJob "+name+" is deleted after its TTL", func() (bool, string) {
		return s.GetTrainJob(t, ns, name) == nil, "still there"
	})
	ws, err := s.Bed.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	var deletes []Write
	for _, w := range ws {
		if w.Verb == "delete" && w.OK() {
			deletes = append(deletes, w)
		}
	}
	if len(deletes) != 1 || deletes[0].User.Username != cluster.ShepherdUser {
		t.Fatalf("TrainJob %s deleted by %d requests, want exactly one by %s:\n%s", name, len(deletes), cluster.ShepherdUser, Lines(deletes))
	}
	return deletes[0]
}

// DependentsGone waits until the garbage collector has removed what
// Trainer, JobSet and the Job controller made for a deleted TrainJob:
// its JobSet, Jobs, Pods and Trainer's runtime snapshot; the JobSet went
// by the garbage collector, or by one of also (a deadline's delete).
func (s *Suite) DependentsGone(t testing.TB, ns, name string, also ...string) {
	t.Helper()
	ctx := context.Background()
	c := s.Cluster.Client
	s.Eventually(t, time.Minute, "the garbage collector removes the dependents of TrainJob "+name, func() (bool, string) {
		var left []string
		js := &unstructured.Unstructured{}
		js.SetGroupVersionKind(JobSetGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, js); err == nil {
			left = append(left, "JobSet")
		}
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs, client.InNamespace(ns)); err == nil && len(jobs.Items) > 0 {
			left = append(left, fmt.Sprintf("%d Jobs", len(jobs.Items)))
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err == nil && len(pods.Items) > 0 {
			left = append(left, fmt.Sprintf("%d Pods", len(pods.Items)))
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-runtime-snapshot"}, &cm); err == nil {
			left = append(left, "runtime snapshot ConfigMap")
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
	ws, err := s.Bed.Writes("jobsets", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Verb == "delete" && w.OK() && w.User.Username != KCMUser && !slices.Contains(also, w.User.Username) {
			t.Errorf("JobSet %s deleted by %s, want only by the garbage collector (%s) or %v", name, w.User.Username, KCMUser, also)
		}
	}
}

// Events are the Events in ns of reason about the named object.
func (s *Suite) Events(t testing.TB, ns, name, reason string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := s.Cluster.Client.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Reason == reason && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}
