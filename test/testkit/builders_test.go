package testkit

import (
	"encoding/json"
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

// A PodCliqueSet and a JobSet as the builders make them: the clique's
// extra spec fields merged (an int stored as int64), Merge adding template
// fields beside the cliques, Labels on the JobSet.
func TestGroveAndJobSetBuilders(t *testing.T) {
	pcs := PodCliqueSet("ns", "set", Clique("worker", 2, "img", map[string]any{"minAvailable": 1})).
		Merge(map[string]any{"terminationDelay": "1s"}, "spec", "template").Obj()
	want := map[string]any{
		"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
		"metadata": map[string]any{"name": "set", "namespace": "ns"},
		"spec": map[string]any{"replicas": int64(1), "template": map[string]any{
			"terminationDelay": "1s",
			"cliques": []any{map[string]any{"name": "worker", "spec": map[string]any{
				"roleName": "worker", "replicas": int64(2), "minAvailable": int64(1),
				"podSpec": map[string]any{"containers": []any{map[string]any{"name": "worker", "image": "img"}}},
			}}},
		}},
	}
	if diff := cmp.Diff(want, pcs.Object); diff != "" {
		t.Errorf("PodCliqueSet (-want +got):\n%s", diff)
	}
	js := JobSet("ns", "js", "img").Labels("team=a").Obj()
	if js.GetAPIVersion() != "jobset.x-k8s.io/v1alpha2" || js.GetKind() != "JobSet" || js.GetLabels()["team"] != "a" {
		t.Errorf("JobSet metadata = %v", js.Object["metadata"])
	}
	jobs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	if len(jobs) != 1 {
		t.Fatalf("replicatedJobs = %v, want one", jobs)
	}
	pod, _, _ := unstructured.NestedMap(jobs[0].(map[string]any), "template", "spec", "template", "spec")
	if pod["restartPolicy"] != "Never" || len(pod["containers"].([]any)) != 1 {
		t.Errorf("JobSet pod template = %v, want one container, restartPolicy Never", pod)
	}
}

// The one builder in every form a test hands its code: a Go type (Into),
// a request body (JSON), a map; each a copy of what was built.
func TestBuilderForms(t *testing.T) {
	b := TrainJob("ns", "job", "torch", 3).UID("uid-1").Labels("team=a")
	type trainJob struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			UID    string            `json:"uid"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Trainer struct {
				NumNodes *int32 `json:"numNodes"`
			} `json:"trainer"`
		} `json:"spec"`
	}
	typed := Into[trainJob](b)
	if typed.Kind != "TrainJob" || typed.Metadata.Name != "job" || typed.Metadata.UID != "uid-1" ||
		typed.Metadata.Labels["team"] != "a" || typed.Spec.Trainer.NumNodes == nil || *typed.Spec.Trainer.NumNodes != 3 {
		t.Errorf("Into = %+v", typed)
	}
	var fromJSON map[string]any
	if err := json.Unmarshal(b.JSON(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if fromJSON["kind"] != "TrainJob" || fromJSON["spec"].(map[string]any)["trainer"].(map[string]any)["numNodes"] != float64(3) {
		t.Errorf("JSON = %v", fromJSON)
	}
	m := b.Map()
	m["kind"] = "changed"
	if b.Obj().GetKind() != "TrainJob" {
		t.Error("Map returned the builder's own object, not a copy")
	}
}
