package trainer_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
)

// runtimeOf is a runtime of kind as served, with spec and annotations.
func runtimeOf(kind string, spec map[string]any, annotations map[string]string) *unstructured.Unstructured {
	rt := trainer.NewRuntime(kind)
	rt.SetName("rt")
	if kind == api.KindTrainingRuntime {
		rt.SetNamespace("ns")
	}
	if annotations != nil {
		rt.SetAnnotations(annotations)
	}
	if spec != nil {
		rt.Object["spec"] = spec
	}
	return rt
}

// clusterRuntime is a ClusterTrainingRuntime with the seed field
// ttlSecondsAfterFinished (when ttl is not nil) and annotations.
func clusterRuntime(ttl *int32, annotations map[string]string) *unstructured.Unstructured {
	var spec map[string]any
	if ttl != nil {
		spec = map[string]any{"ttlSecondsAfterFinished": int64(*ttl)}
	}
	return runtimeOf(api.KindClusterTrainingRuntime, spec, annotations)
}

func TestRuntimeTTLOf(t *testing.T) {
	ttlAnnotation := func(v string) map[string]string {
		return map[string]string{api.AnnotationTTLSecondsAfterFinished: v}
	}
	cases := []struct {
		name    string
		rt      client.Object
		want    *int32
		wantErr string
	}{
		{name: "neither form: no TTL", rt: clusterRuntime(nil, nil)},
		{name: "seed field", rt: clusterRuntime(ptr.To[int32](60), nil), want: ptr.To[int32](60)},
		{name: "seed field 0", rt: clusterRuntime(ptr.To[int32](0), nil), want: ptr.To[int32](0)},
		{name: "carrier", rt: clusterRuntime(nil, ttlAnnotation("3600")), want: ptr.To[int32](3600)},
		{name: "carrier 0", rt: clusterRuntime(nil, ttlAnnotation("0")), want: ptr.To[int32](0)},
		{name: "field wins over carrier", rt: clusterRuntime(ptr.To[int32](5), ttlAnnotation("7")), want: ptr.To[int32](5)},
		{
			name: "namespaced runtime, carrier",
			rt:   runtimeOf(api.KindTrainingRuntime, nil, ttlAnnotation("30")),
			want: ptr.To[int32](30),
		},
		{
			name:    "an object of no kind",
			rt:      &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"ttlSecondsAfterFinished": int64(9)}}},
			wantErr: "not a Trainer runtime",
		},
		{name: "carrier not an integer", rt: clusterRuntime(nil, ttlAnnotation("1h")),
			wantErr: `annotation shepherd.dev/ttl-seconds-after-finished: "1h" is not an integer`},
		{name: "carrier negative", rt: clusterRuntime(nil, ttlAnnotation("-1")),
			wantErr: "annotation shepherd.dev/ttl-seconds-after-finished: -1 is out of range"},
		{name: "carrier beyond int32", rt: clusterRuntime(nil, ttlAnnotation(strconv.Itoa(math.MaxInt32+1))),
			wantErr: "is out of range"},
		{name: "seed field negative", rt: clusterRuntime(ptr.To[int32](-3), nil),
			wantErr: "ttlSecondsAfterFinished: -3 is out of range"},
		{name: "not a runtime", rt: &trainerv1alpha1.TrainJob{}, wantErr: "not a Trainer runtime"},
		{name: "nil runtime", rt: (*unstructured.Unstructured)(nil), wantErr: "no runtime"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trainer.RuntimeTTLOf(tc.rt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RuntimeTTLOf error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("RuntimeTTLOf: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RuntimeTTLOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsesWorkload(t *testing.T) {
	withPolicy := func(p map[string]any, annotations map[string]string) *unstructured.Unstructured {
		var spec map[string]any
		if p != nil {
			spec = map[string]any{"podGroupPolicy": p}
		}
		return runtimeOf(api.KindClusterTrainingRuntime, spec, annotations)
	}
	carrier := func(v string) map[string]string { return map[string]string{api.AnnotationPodGroupPolicy: v} }
	cases := []struct {
		name string
		rt   client.Object
		want bool
	}{
		{name: "no policy", rt: withPolicy(nil, nil)},
		{name: "seed field", rt: withPolicy(map[string]any{"workload": map[string]any{}}, nil), want: true},
		{name: "coscheduling", rt: withPolicy(map[string]any{"coscheduling": map[string]any{}}, nil)},
		{name: "carrier", rt: withPolicy(nil, carrier("workload")), want: true},
		{name: "namespaced runtime, carrier", rt: runtimeOf(api.KindTrainingRuntime, nil, carrier("workload")), want: true},
		{name: "carrier with another value is not the workload policy", rt: withPolicy(nil, carrier("Workload"))},
		{name: "empty carrier", rt: withPolicy(nil, carrier(""))},
		{name: "an object of no kind, carrier", rt: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{api.AnnotationPodGroupPolicy: "workload"}}}}},
		{name: "not a runtime", rt: &trainerv1alpha1.TrainJob{}},
		{name: "nil runtime", rt: (*unstructured.Unstructured)(nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := trainer.UsesWorkload(tc.rt); got != tc.want {
				t.Errorf("UsesWorkload = %v, want %v", got, tc.want)
			}
		})
	}
}

// fieldSchemas is a knob.FieldSchemas holding the listed fields.
type fieldSchemas map[schema.GroupKind][]string

func (f fieldSchemas) HasField(gk schema.GroupKind, path []string) bool {
	return slices.Contains(f[gk], strings.Join(path, "."))
}

func TestEnforcesDeadline(t *testing.T) {
	trainJob := schema.GroupKind{Group: trainer.Group, Kind: api.KindTrainJob}
	pinned, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := seedcrds.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		schemas interface {
			HasField(schema.GroupKind, []string) bool
		}
		want bool
	}{
		{name: "no schema known", schemas: nil},
		{name: "TrainJob without the field (Trainer < v2.2)", schemas: fieldSchemas{trainJob: {"spec.runtimeRef"}}},
		{name: "no TrainJob served", schemas: fieldSchemas{}},
		{name: "TrainJob with the field", schemas: fieldSchemas{trainJob: {"spec.activeDeadlineSeconds"}}, want: true},
		{name: "the pinned Trainer v2.3.0 CRD", schemas: pinned, want: true},
		// The seed-shaped TrainJob has the field too: on a real cluster the
		// TrainJob CRD is Trainer's, so the field means Trainer enforces it.
		{name: "the seed-shaped CRD", schemas: seed, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got bool
			var why string
			if tc.schemas == nil {
				got, why = trainer.EnforcesDeadline(nil)
			} else {
				got, why = trainer.EnforcesDeadline(tc.schemas)
			}
			if got != tc.want {
				t.Errorf("EnforcesDeadline = %v (%s), want %v", got, why, tc.want)
			}
			if why == "" {
				t.Errorf("EnforcesDeadline gave no reason")
			}
		})
	}
}

// A runtime read as served: its kind only when it is one of Trainer's
// runtimes, its replicatedJobs with their Job templates' labels, and
// mlPolicy.numNodes however JSON decoded it.
func TestRuntimeAsServed(t *testing.T) {
	rt := runtimeOf(api.KindClusterTrainingRuntime, map[string]any{
		"mlPolicy": map[string]any{"numNodes": float64(3)},
		"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{
			map[string]any{"name": "init", "template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"step": "init"}}}},
			"not a job",
			map[string]any{"name": "node"},
		}}},
	}, nil)
	if kind, ok := trainer.RuntimeKind(rt); !ok || kind != api.KindClusterTrainingRuntime {
		t.Errorf("RuntimeKind = %q, %v; want ClusterTrainingRuntime", kind, ok)
	}
	tj := &unstructured.Unstructured{}
	tj.SetGroupVersionKind(schema.GroupVersionKind{Group: trainer.Group, Version: "v1alpha1", Kind: api.KindTrainJob})
	for _, o := range []client.Object{tj, &trainerv1alpha1.TrainJob{}, (*unstructured.Unstructured)(nil)} {
		if kind, ok := trainer.RuntimeKind(o); ok {
			t.Errorf("RuntimeKind(%T %v) = %q, want not a runtime", o, o, kind)
		}
	}
	want := []trainer.RuntimeJob{{Name: "init", Labels: map[string]string{"step": "init"}}, {Name: "node"}}
	if diff := cmp.Diff(want, trainer.RuntimeJobs(rt)); diff != "" {
		t.Errorf("RuntimeJobs (-want +got):\n%s", diff)
	}
	if n, ok := trainer.RuntimeNodes(rt); !ok || n != 3 {
		t.Errorf("RuntimeNodes = %d, %v; want 3", n, ok)
	}
	if _, ok := trainer.RuntimeNodes(runtimeOf(api.KindTrainingRuntime, nil, nil)); ok {
		t.Error("RuntimeNodes of a runtime without mlPolicy: ok, want none")
	}
}
