package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

func policy(name, group, kind, expr, message string) *shepherdv1alpha1.WorkloadPolicy {
	return testkit.Policy(name, group, kind).Validation(expr, message).Obj()
}

// readyCondition waits for the policy's Ready condition to have status.
func readyCondition(t *testing.T, name string, status metav1.ConditionStatus) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	testkit.Eventually(t, timeout, "WorkloadPolicy "+name+" Ready="+string(status), func() (bool, string) {
		p := &shepherdv1alpha1.WorkloadPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return false, err.Error()
		}
		cond = meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady)
		if cond == nil || p.Status.ObservedGeneration != p.Generation {
			return false, "no current Ready condition"
		}
		return cond.Status == status, cond.Message
	})
	return cond
}

// TestPoliciesOnUpstreamFields: a WorkloadPolicy on a field only the
// upstream schema has (TrainJob spec.managedBy, a PodCliqueSet's
// spec.template.topologyConstraint) compiles and is enforced; one on a field
// the served schema lacks reports a compile error naming it and is not
// enforced.
func TestPoliciesOnUpstreamFields(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	runtime := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
		"metadata": map[string]any{"name": "interop-policies"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{
			map[string]any{"name": "node", "template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "node", "image": "busybox"}}}}}}},
		}}}},
	}}
	if err := env.Client.Create(ctx, runtime); err != nil {
		t.Fatal(err)
	}

	managedBy := policy("no-multikueue", "trainer.kubeflow.org", "TrainJob",
		"object.spec.?managedBy.orValue('') != 'kueue.x-k8s.io/multikueue'", "MultiKueue is not enabled in this cluster")
	topology := policy("pcs-topology", "grove.io", "PodCliqueSet",
		"!object.spec.template.?topologyConstraint.hasValue()", "topology constraints need the topology-aware scheduler")
	seedOnly := policy("runtime-ttl-field", "trainer.kubeflow.org", "ClusterTrainingRuntime",
		"object.spec.?ttlSecondsAfterFinished.orValue(0) <= 86400", "keep finished TrainJobs at most a day")
	// The policy on a field the served schema lacks is refused at apply,
	// naming the field; labelled apply-unchecked (as one applied ahead of
	// a CRD that has the field) it is stored and reports the error.
	if err := env.Client.Create(ctx, seedOnly.DeepCopy()); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "undefined field 'ttlSecondsAfterFinished'") {
		t.Errorf("applying a policy on a field the schema lacks: want a 422 naming the field, got %v", err)
	}
	seedOnly.Labels = map[string]string{api.LabelApplyUnchecked: "true"}
	for _, p := range []*shepherdv1alpha1.WorkloadPolicy{managedBy, topology, seedOnly} {
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	}
	readyCondition(t, managedBy.Name, metav1.ConditionTrue)
	readyCondition(t, topology.Name, metav1.ConditionTrue)
	cond := readyCondition(t, seedOnly.Name, metav1.ConditionFalse)
	if !strings.Contains(cond.Message, "ttlSecondsAfterFinished") {
		t.Errorf("compile error does not name the missing field: %s", cond.Message)
	}

	spec := func(managed string) map[string]any {
		s := map[string]any{"runtimeRef": map[string]any{"name": runtime.GetName()}}
		if managed != "" {
			s["managedBy"] = managed
		}
		return s
	}
	err := env.Client.Create(ctx, testkit.Object("trainer.kubeflow.org/v1alpha1", "TrainJob", ns, "multikueue").Set(spec("kueue.x-k8s.io/multikueue"), "spec").Obj())
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "MultiKueue is not enabled") {
		t.Errorf("TrainJob managed by MultiKueue: want the policy's denial, got %v", err)
	}
	// shepherd's lookup of the runtime (V-TJ-3) reads its cache, which
	// sees the new runtime a moment after it was created.
	testkit.Eventually(t, timeout, "TrainJob without managedBy admitted", func() (bool, string) {
		err := env.Client.Create(ctx, testkit.Object("trainer.kubeflow.org/v1alpha1", "TrainJob", ns, "plain").Set(spec(""), "spec").Obj())
		return err == nil, fmt.Sprint(err)
	})
	// The policy on the missing field is not enforced: a runtime it would
	// deny, were the field served, is admitted (the field pruned).
	long := runtime.DeepCopy()
	long.SetName("interop-long-ttl")
	long.SetResourceVersion("")
	if err := env.Client.Create(ctx, long); err != nil {
		t.Errorf("a policy that does not compile was enforced: %v", err)
	}
}
