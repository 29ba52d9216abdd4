package grove

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// fieldSchemas is a served schema that has the given field paths.
type fieldSchemas []string

func (f fieldSchemas) HasField(_ schema.GroupKind, path []string) bool {
	return slices.Contains(f, strings.Join(path, "."))
}

var seed = fieldSchemas{"status.wasAvailable", "status.phase", "status.restartCount", "status.startTime"}

// seedSet is pcs as served, with the seed fields of fields (path → value)
// added, as a cluster whose CRDs keep them serves it.
func seedSet(pcs *grovev1alpha1.PodCliqueSet, fields map[string]any) *Set {
	s := SetOf(pcs)
	for path, v := range fields {
		if err := unstructured.SetNestedField(s.Served.Object, v, strings.Split(path, ".")...); err != nil {
			panic(err)
		}
	}
	return s
}

func annotated(a map[string]string) *grovev1alpha1.PodCliqueSet {
	return &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: a}}
}

func TestTrainingKnobs(t *testing.T) {
	type out struct {
		Type        string
		MaxRestarts *int32
		MaxRuntime  *time.Duration
		Err         bool
	}
	tests := []struct {
		name string
		pcs  *Set
		want out
	}{
		{name: "nothing set", pcs: seedSet(annotated(nil), nil)},
		{name: "seed fields", pcs: seedSet(annotated(nil), map[string]any{
			"spec.workloadType": "Training", "spec.trainingSpec.maxRestarts": int64(2), "spec.trainingSpec.maxRuntime": "1h"}),
			want: out{Type: "Training", MaxRestarts: ptr.To[int32](2), MaxRuntime: ptr.To(time.Hour)}},
		{name: "carriers", pcs: seedSet(annotated(map[string]string{
			api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "3", api.AnnotationMaxRuntime: "90m"}), nil),
			want: out{Type: "Training", MaxRestarts: ptr.To[int32](3), MaxRuntime: ptr.To(90 * time.Minute)}},
		{name: "the field wins", pcs: seedSet(annotated(map[string]string{api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "3"}),
			map[string]any{"spec.workloadType": "Inference", "spec.trainingSpec.maxRestarts": int64(1)}),
			want: out{Type: "Inference", MaxRestarts: ptr.To[int32](1)}},
		{name: "a carrier that is not a number", pcs: seedSet(annotated(map[string]string{
			api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "many"}), nil),
			want: out{Type: "Training", Err: true}},
		{name: "a negative budget", pcs: seedSet(annotated(map[string]string{api.AnnotationMaxRestarts: "-1"}), nil),
			want: out{Err: true}},
		{name: "a zero runtime", pcs: seedSet(annotated(map[string]string{api.AnnotationMaxRuntime: "0s"}), nil),
			want: out{Err: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, d, err := TrainingLimits(tc.pcs)
			got := out{Type: WorkloadTypeOf(tc.pcs), MaxRestarts: n, MaxRuntime: d, Err: err != nil}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if IsTrainingSet(tc.pcs) != (tc.want.Type == "Training") {
				t.Errorf("IsTrainingSet = %v", IsTrainingSet(tc.pcs))
			}
		})
	}
	if IsTrainingSet(nil) {
		t.Error("a nil set is not Training")
	}
}

func TestScalingGroupDelayOf(t *testing.T) {
	pcs := annotated(map[string]string{api.AnnotationTerminationDelay: "a=1s,b=2s"})
	pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "b"}}
	set := seedSet(pcs, nil)
	// The seed field of config b wins over its carrier entry.
	cfgs, _, _ := unstructured.NestedSlice(set.Served.Object, "spec", "template", "podCliqueScalingGroups")
	cfgs[0].(map[string]any)["terminationDelay"] = "1m"
	_ = unstructured.SetNestedSlice(set.Served.Object, cfgs, "spec", "template", "podCliqueScalingGroups")
	g := GroupOf(&grovev1alpha1.PodCliqueScalingGroup{})
	for cfg, want := range map[string]*time.Duration{"a": ptr.To(time.Second), "b": ptr.To(time.Minute), "c": nil} {
		got, err := ScalingGroupDelayOf(set, &g, cfg)
		if err != nil || !cmp.Equal(got, want) {
			t.Errorf("%s: got %v, %v; want %v", cfg, got, err, want)
		}
	}
	_ = unstructured.SetNestedField(g.Served.Object, "1h", "spec", "terminationDelay")
	if got, _ := ScalingGroupDelayOf(set, &g, "a"); !cmp.Equal(got, ptr.To(time.Hour)) {
		t.Errorf("the PCSG's own field: got %v, want 1h", got)
	}
	_ = unstructured.SetNestedField(g.Served.Object, "soon", "spec", "terminationDelay")
	if _, err := ScalingGroupDelayOf(set, &g, "a"); err == nil || !strings.Contains(err.Error(), "spec.terminationDelay") {
		t.Errorf("a field that is not a duration: got %v, want an error naming spec.terminationDelay", err)
	}
}

func TestUpdateInProgress(t *testing.T) {
	ended := metav1.NewTime(time.Unix(2, 0))
	running := map[string]any{"updateStartedAt": "1970-01-01T00:00:01Z"}
	done := map[string]any{"updateStartedAt": "1970-01-01T00:00:01Z", "updateEndedAt": "1970-01-01T00:00:02Z"}
	tests := []struct {
		name   string
		seed   map[string]any
		upstrm *grovev1alpha1.PodCliqueUpdateProgress
		want   bool
	}{
		{name: "none"},
		{name: "seed rollingUpdateProgress", seed: running, want: true},
		{name: "Grove's updateProgress", upstrm: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(time.Unix(1, 0))}, want: true},
		{name: "ended", seed: done, upstrm: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(time.Unix(1, 0)), UpdateEndedAt: &ended}},
	}
	for _, tc := range tests {
		c := CliqueOf(&grovev1alpha1.PodClique{Status: grovev1alpha1.PodCliqueStatus{UpdateProgress: tc.upstrm}})
		if tc.seed != nil {
			_ = unstructured.SetNestedMap(c.Served.Object, tc.seed, "status", "rollingUpdateProgress")
		}
		if got := UpdateInProgress(&c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// WasAvailable reads what an earlier shepherd kept on a PodClique, in
// either form, once, on upgrade (shepherd now keeps it in its records).
func TestWasAvailable(t *testing.T) {
	seedField := CliqueOf(&grovev1alpha1.PodClique{})
	_ = unstructured.SetNestedField(seedField.Served.Object, true, "status", "wasAvailable")
	tests := []struct {
		name string
		c    Clique
		want bool
	}{
		{name: "the seed field", c: seedField, want: true},
		{name: "the carrier", c: CliqueOf(&grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationWasAvailable: "true"}}}), want: true},
		{name: "neither", c: CliqueOf(&grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"x": "y"}}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := WasAvailable(&tc.c); got != tc.want {
				t.Errorf("WasAvailable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTrainingStatus(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	st := TrainingStatus{Phase: shepherdv1alpha1.PhaseRunning, RestartCount: 2, StartTime: &start}
	type out struct {
		Status      map[string]any
		Annotations map[string]string
	}
	tests := []struct {
		name    string
		before  map[string]string
		schemas knob.FieldSchemas
		want    out
	}{
		{name: "seed: the fields", schemas: seed, want: out{Status: map[string]any{"phase": "Running", "restartCount": int64(2), "startTime": "2026-01-01T12:00:00Z"}}},
		{name: "seed: stale carriers are removed", schemas: seed, before: map[string]string{api.AnnotationRestartCount: "1", "x": "y"},
			want: out{Status: map[string]any{"phase": "Running", "restartCount": int64(2), "startTime": "2026-01-01T12:00:00Z"}, Annotations: map[string]string{"x": "y"}}},
		{name: "Grove: the carriers", schemas: fieldSchemas{}, want: out{Annotations: map[string]string{
			api.AnnotationTrainingPhase: "Running", api.AnnotationRestartCount: "2", api.AnnotationStartTime: "2026-01-01T12:00:00Z"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := seedSet(annotated(tc.before), nil)
			SetTrainingStatus(pcs, st, tc.schemas)
			status, _, _ := unstructured.NestedMap(pcs.Served.Object, "status")
			delete(status, "availableReplicas")
			delete(status, "updatedReplicas")
			got := out{status, pcs.Annotations}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("written (-want +got):\n%s", diff)
			}
			back, err := TrainingStatusOf(pcs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(st, back); diff != "" {
				t.Errorf("read back (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrainingStatusOfBadCarriers(t *testing.T) {
	pcs := seedSet(annotated(map[string]string{
		api.AnnotationTrainingPhase: "Done", api.AnnotationRestartCount: "x", api.AnnotationStartTime: "yesterday"}), nil)
	_, err := TrainingStatusOf(pcs)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{api.AnnotationTrainingPhase, api.AnnotationRestartCount, api.AnnotationStartTime} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The field wins over a bad carrier: nothing to report.
	_ = unstructured.SetNestedMap(pcs.Served.Object, map[string]any{"phase": "Running", "restartCount": int64(1), "startTime": "2026-01-01T12:00:00Z"}, "status")
	if _, err := TrainingStatusOf(pcs); err != nil {
		t.Errorf("fields set: %v", err)
	}
	// A field that is not a phase is named too.
	_ = unstructured.SetNestedField(pcs.Served.Object, "Done", "status", "phase")
	if _, err := TrainingStatusOf(pcs); err == nil || !strings.Contains(err.Error(), "status.phase") {
		t.Errorf("a bad phase field: got %v, want an error naming status.phase", err)
	}
}
