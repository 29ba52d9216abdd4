package workload

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// rj is a replicatedJob of a runtime's JobSet template, as served.
func rj(name string, labels map[string]string) map[string]any {
	j := map[string]any{"name": name, "template": map[string]any{}}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		j["template"] = map[string]any{"metadata": map[string]any{"labels": l}}
	}
	return j
}

// runtimeSpec is a runtime's spec as served: podGroupPolicy.workload (the
// seed field) when workload, mlPolicy.numNodes when mlNodes is set.
func runtimeSpec(workload bool, mlNodes *int32, jobs ...map[string]any) map[string]any {
	list := make([]any, 0, len(jobs))
	for _, j := range jobs {
		list = append(list, j)
	}
	s := map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": list}}}
	if mlNodes != nil {
		s["mlPolicy"] = map[string]any{"numNodes": int64(*mlNodes)}
	}
	if workload {
		s["podGroupPolicy"] = map[string]any{"workload": map[string]any{}}
	}
	return s
}

// runtimeOf is a runtime of kind as served, with spec.
func runtimeOf(kind string, spec map[string]any, annotations map[string]string) *unstructured.Unstructured {
	rt := trainer.NewRuntime(kind)
	rt.SetName("rt")
	if kind == api.KindTrainingRuntime {
		rt.SetNamespace("ns")
	}
	rt.Object["spec"] = spec
	if annotations != nil {
		rt.SetAnnotations(annotations)
	}
	return rt
}

// trainJob is ns/my-job with numNodes (nil: the runtime's).
func trainJob(numNodes *int32) *trainerv1alpha1.TrainJob {
	return testkit.Into[trainerv1alpha1.TrainJob](testkit.TrainJob("ns", "my-job", "torch", int64(ptr.Deref(numNodes, 0))).UID("uid-1"))
}

func TestPlanFor(t *testing.T) {
	trainerLabel := map[string]string{api.LabelTrainJobAncestorStep: api.AncestorTrainer}
	gang := func(n int32) GroupTemplate {
		return GroupTemplate{Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: n}
	}
	initializer := GroupTemplate{Name: api.PodGroupTemplateInitializer}
	cases := []struct {
		name string
		tj   *trainerv1alpha1.TrainJob
		spec map[string]any
		// carrier is the runtime's shepherd.dev/pod-group-policy
		// annotation, "" for none.
		carrier string
		want    Plan
		wantOK  bool
	}{
		{
			name: "no podGroupPolicy: nothing",
			tj:   trainJob(ptr.To[int32](4)),
			spec: runtimeSpec(false, ptr.To[int32](1), rj("node", trainerLabel)),
		},
		{
			name: "coscheduling podGroupPolicy: nothing",
			tj:   trainJob(ptr.To[int32](4)),
			spec: func() map[string]any {
				s := runtimeSpec(false, ptr.To[int32](1), rj("node", trainerLabel))
				s["podGroupPolicy"] = map[string]any{"coscheduling": map[string]any{}}
				return s
			}(),
		},
		{
			name:   "torch: trainer gang, minCount from trainer.numNodes",
			tj:     trainJob(ptr.To[int32](100)),
			spec:   runtimeSpec(true, ptr.To[int32](1), rj("node", trainerLabel)),
			want:   Plan{Templates: []GroupTemplate{gang(100)}},
			wantOK: true,
		},
		{
			name:   "minCount falls back to mlPolicy.numNodes",
			tj:     trainJob(nil),
			spec:   runtimeSpec(true, ptr.To[int32](3), rj("node", trainerLabel)),
			want:   Plan{Templates: []GroupTemplate{gang(3)}},
			wantOK: true,
		},
		{
			name:   "neither numNodes set: minCount 1",
			tj:     trainJob(nil),
			spec:   runtimeSpec(true, nil, rj("node", nil)),
			want:   Plan{Templates: []GroupTemplate{gang(1)}},
			wantOK: true,
		},
		{
			name:   "MPI: launcher and nodes share one trainer gang",
			tj:     trainJob(ptr.To[int32](50)),
			spec:   runtimeSpec(true, ptr.To[int32](1), rj("launcher", trainerLabel), rj("node", nil)),
			want:   Plan{Templates: []GroupTemplate{gang(50)}},
			wantOK: true,
		},
		{
			name: "initializers labelled: basic initializer group plus trainer gang",
			tj:   trainJob(ptr.To[int32](8)),
			spec: runtimeSpec(true, ptr.To[int32](1),
				rj("dataset-initializer", map[string]string{api.LabelTrainJobAncestorStep: api.AncestorDatasetInitializer}),
				rj("model-initializer", map[string]string{api.LabelTrainJobAncestorStep: api.AncestorModelInitializer}),
				rj("node", trainerLabel)),
			want:   Plan{Templates: []GroupTemplate{initializer, gang(8)}},
			wantOK: true,
		},
		{
			name:   "initializer recognised by replicatedJob name alone",
			tj:     trainJob(ptr.To[int32](2)),
			spec:   runtimeSpec(true, nil, rj("model-initializer", nil), rj("node", nil)),
			want:   Plan{Templates: []GroupTemplate{initializer, gang(2)}},
			wantOK: true,
		},
		{
			name:    "carrier annotation instead of the seed field (upstream runtime CRD)",
			tj:      trainJob(ptr.To[int32](4)),
			spec:    runtimeSpec(false, ptr.To[int32](1), rj("dataset-initializer", nil), rj("node", trainerLabel)),
			carrier: api.PodGroupPolicyWorkload,
			want:    Plan{Templates: []GroupTemplate{initializer, gang(4)}},
			wantOK:  true,
		},
		{
			name:    "carrier with another value: nothing",
			tj:      trainJob(ptr.To[int32](4)),
			spec:    runtimeSpec(false, ptr.To[int32](1), rj("node", trainerLabel)),
			carrier: "coscheduling",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var annotations map[string]string
			if tc.carrier != "" {
				annotations = map[string]string{api.AnnotationPodGroupPolicy: tc.carrier}
			}
			rt := runtimeOf(api.KindClusterTrainingRuntime, tc.spec, annotations)
			got, ok := PlanFor(tc.tj, rt)
			if ok != tc.wantOK {
				t.Fatalf("PlanFor ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlanFor (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanForNamespacedRuntimeAndNonRuntimes(t *testing.T) {
	tr := runtimeOf(api.KindTrainingRuntime, runtimeSpec(false, ptr.To[int32](3), rj("node", nil)),
		map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload})
	got, ok := PlanFor(trainJob(nil), tr)
	if diff := cmp.Diff(Plan{Templates: []GroupTemplate{{Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: 3}}}, got); !ok || diff != "" {
		t.Errorf("PlanFor(TrainingRuntime with carrier) ok = %v (-want +got):\n%s", ok, diff)
	}
	if _, ok := PlanFor(trainJob(nil), nil); ok {
		t.Errorf("PlanFor(nil runtime) ok = true, want false")
	}
	asRuntime := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"annotations": map[string]any{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload}},
		"spec":     runtimeSpec(true, nil, rj("node", nil))}}
	if _, ok := PlanFor(trainJob(nil), asRuntime); ok {
		t.Errorf("PlanFor(a TrainJob as runtime) ok = true, want false")
	}
}

func TestBuildWorkload(t *testing.T) {
	tj := trainJob(ptr.To[int32](8))
	plan := Plan{Templates: []GroupTemplate{{Name: "initializer"}, {Name: "trainer", Gang: true, MinCount: 8}}}
	got := BuildWorkload(tj, plan, "v1beta1")
	want := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.k8s.io/v1beta1",
		"kind":       "Workload",
		"metadata": map[string]any{
			"name": "my-job", "namespace": "ns",
			"ownerReferences": []any{map[string]any{
				"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "my-job", "uid": "uid-1",
				"controller": true,
			}},
		},
		"spec": map[string]any{
			"controllerRef": map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "TrainJob", "name": "my-job"},
			"podGroupTemplates": []any{
				map[string]any{"name": "initializer", "schedulingPolicy": map[string]any{"basic": map[string]any{}}},
				map[string]any{"name": "trainer", "schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(8)}}},
			},
		},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildWorkload (-want +got):\n%s", diff)
	}
}

func TestBuildPodGroup(t *testing.T) {
	tj := trainJob(ptr.To[int32](8))
	trainer := GroupTemplate{Name: "trainer", Gang: true, MinCount: 8}
	owners := func(apiVersion string) []any {
		return []any{
			map[string]any{"apiVersion": apiVersion, "kind": "Workload", "name": "my-job", "uid": "wl-uid"},
			map[string]any{
				"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "my-job", "uid": "uid-1",
				"controller": true,
			},
		}
	}
	policy := map[string]any{"gang": map[string]any{"minCount": int64(8)}}
	for _, tc := range []struct {
		version string
		ref     map[string]any
	}{
		{"v1beta1", map[string]any{"workloadRef": map[string]any{"workloadName": "my-job", "templateName": "trainer"}}},
		{"v1alpha3", map[string]any{"workloadRef": map[string]any{"workloadName": "my-job", "templateName": "trainer"}}},
		{"v1alpha2", map[string]any{"podGroupTemplateRef": map[string]any{"workload": map[string]any{"workloadName": "my-job", "podGroupTemplateName": "trainer"}}}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			got := BuildPodGroup(tj, trainer, tc.version, "my-job", "wl-uid")
			spec := map[string]any{"schedulingPolicy": policy}
			for k, v := range tc.ref {
				spec[k] = v
			}
			apiVersion := "scheduling.k8s.io/" + tc.version
			want := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": apiVersion,
				"kind":       "PodGroup",
				"metadata": map[string]any{
					"name":            api.PodGroupName("my-job", "uid-1", "trainer"),
					"namespace":       "ns",
					"ownerReferences": owners(apiVersion),
				},
				"spec": spec,
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("BuildPodGroup (-want +got):\n%s", diff)
			}
		})
	}
}
