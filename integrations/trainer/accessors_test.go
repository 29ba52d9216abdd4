package trainer_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func clusterRuntime(ttl *int32, annotations map[string]string) *trainerv1alpha1.ClusterTrainingRuntime {
	return &trainerv1alpha1.ClusterTrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "rt", Annotations: annotations},
		Spec:       trainerv1alpha1.TrainingRuntimeSpec{TTLSecondsAfterFinished: ttl},
	}
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
			rt: &trainerv1alpha1.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{
				Name: "rt", Namespace: "ns", Annotations: ttlAnnotation("30")}},
			want: ptr.To[int32](30),
		},
		{
			name: "unstructured, carrier",
			rt: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
				"annotations": map[string]any{api.AnnotationTTLSecondsAfterFinished: "12"}}}},
			want: ptr.To[int32](12),
		},
		{
			name: "unstructured, field",
			rt:   &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"ttlSecondsAfterFinished": int64(9)}}},
			want: ptr.To[int32](9),
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
		{name: "nil runtime", rt: (*trainerv1alpha1.ClusterTrainingRuntime)(nil), wantErr: "no runtime"},
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
	withPolicy := func(p *trainerv1alpha1.PodGroupPolicy, annotations map[string]string) *trainerv1alpha1.ClusterTrainingRuntime {
		rt := clusterRuntime(nil, annotations)
		rt.Spec.PodGroupPolicy = p
		return rt
	}
	carrier := func(v string) map[string]string { return map[string]string{api.AnnotationPodGroupPolicy: v} }
	cases := []struct {
		name string
		rt   client.Object
		want bool
	}{
		{name: "no policy", rt: withPolicy(nil, nil)},
		{name: "seed field", rt: withPolicy(&trainerv1alpha1.PodGroupPolicy{Workload: &trainerv1alpha1.WorkloadPodGroupPolicySource{}}, nil), want: true},
		{name: "coscheduling", rt: withPolicy(&trainerv1alpha1.PodGroupPolicy{Coscheduling: &trainerv1alpha1.CoschedulingPodGroupPolicySource{}}, nil)},
		{name: "carrier", rt: withPolicy(nil, carrier("workload")), want: true},
		{name: "namespaced runtime, carrier", rt: &trainerv1alpha1.TrainingRuntime{
			ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns", Annotations: carrier("workload")}}, want: true},
		{name: "carrier with another value is not the workload policy", rt: withPolicy(nil, carrier("Workload"))},
		{name: "empty carrier", rt: withPolicy(nil, carrier(""))},
		{name: "unstructured carrier", rt: &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{api.AnnotationPodGroupPolicy: "workload"}}}}, want: true},
		{name: "not a runtime", rt: &trainerv1alpha1.TrainJob{}},
		{name: "nil runtime", rt: (*trainerv1alpha1.TrainingRuntime)(nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := trainer.UsesWorkload(tc.rt); got != tc.want {
				t.Errorf("UsesWorkload = %v, want %v", got, tc.want)
			}
		})
	}
}

// knobObject leaves a typed runtime's JobSet template out of what the
// knobs read: no knob may live there.
func TestNoKnobInTheRuntimeTemplate(t *testing.T) {
	for _, k := range trainer.Knobs {
		if slices.Equal(k.Path[:min(2, len(k.Path))], []string{"spec", "template"}) {
			t.Errorf("knob %s lives under spec.template, which the typed accessors do not read", k.Name)
		}
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
