package testkit

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// A TrainJob as the builders make it: the runtime reference, numNodes as
// int64 (what unstructured holds), Merge replacing whole top-level spec
// fields, and Obj a copy that later setters do not change.
func TestTrainJobBuilder(t *testing.T) {
	b := TrainJob("ns", "job", "torch", 2).Image("img").Labels("team=a")
	first := b.Obj()
	b.Merge(map[string]any{"suspend": true, "trainer": map[string]any{"numNodes": int64(4)}}, "spec")
	want := map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": "job", "namespace": "ns", "labels": map[string]any{"team": "a"}},
		"spec": map[string]any{
			"runtimeRef": map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch"},
			"trainer":    map[string]any{"numNodes": int64(4)},
			"suspend":    true,
		},
	}
	if diff := cmp.Diff(want, b.Obj().Object); diff != "" {
		t.Errorf("TrainJob (-want +got):\n%s", diff)
	}
	if got, _, _ := unstructured.NestedInt64(first.Object, "spec", "trainer", "numNodes"); got != 2 {
		t.Errorf("Obj's copy changed with the builder: numNodes %d, want 2", got)
	}
	if TrainJob("ns", "job", "torch", 0).Obj().Object["spec"].(map[string]any)["trainer"] != nil {
		t.Error("numNodes 0 set spec.trainer, want it left to the runtime")
	}
}

// A policy as the builder makes it: Deny on CREATE and UPDATE of the kind,
// then what the setters say.
func TestPolicyBuilder(t *testing.T) {
	p := TrainJobPolicy("p").Action(shepherdv1alpha1.ActionWarn).Validation("true", "m").FieldPath("spec.x").
		NamespaceLabels(map[string]string{"a": "b"}).Obj()
	if p.Spec.Action != shepherdv1alpha1.ActionWarn || len(p.Spec.Validations) != 1 || p.Spec.Validations[0].FieldPath != "spec.x" ||
		p.Spec.Match.NamespaceSelector.MatchLabels["a"] != "b" ||
		!cmp.Equal(p.Spec.Match.Resources[0].Operations, []string{"CREATE", "UPDATE"}) || p.Spec.Match.Resources[0].Kinds[0] != "TrainJob" {
		t.Errorf("policy = %+v", p.Spec)
	}
	if p.Kind != "WorkloadPolicy" || p.APIVersion != "shepherd.dev/v1alpha1" {
		t.Errorf("type meta = %+v", p.TypeMeta)
	}
}
