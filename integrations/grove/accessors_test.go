package grove

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// fieldSchemas is a served schema that has the given field paths.
type fieldSchemas []string

func (f fieldSchemas) HasField(_ schema.GroupKind, path []string) bool {
	return slices.Contains(f, strings.Join(path, "."))
}

var seed = fieldSchemas{"status.wasAvailable", "status.phase", "status.restartCount", "status.startTime"}

func TestTrainingKnobs(t *testing.T) {
	type out struct {
		Type        grovev1alpha1.WorkloadType
		MaxRestarts *int32
		MaxRuntime  *time.Duration
		Err         bool
	}
	tests := []struct {
		name string
		pcs  grovev1alpha1.PodCliqueSet
		want out
	}{
		{name: "nothing set"},
		{name: "seed fields", pcs: grovev1alpha1.PodCliqueSet{Spec: grovev1alpha1.PodCliqueSetSpec{
			WorkloadType: ptr.To(grovev1alpha1.WorkloadTypeTraining),
			TrainingSpec: &grovev1alpha1.TrainingSpec{MaxRestarts: ptr.To[int32](2), MaxRuntime: &metav1.Duration{Duration: time.Hour}}}},
			want: out{Type: "Training", MaxRestarts: ptr.To[int32](2), MaxRuntime: ptr.To(time.Hour)}},
		{name: "carriers", pcs: grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "3", api.AnnotationMaxRuntime: "90m"}}},
			want: out{Type: "Training", MaxRestarts: ptr.To[int32](3), MaxRuntime: ptr.To(90 * time.Minute)}},
		{name: "the field wins", pcs: grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "3"}},
			Spec: grovev1alpha1.PodCliqueSetSpec{WorkloadType: ptr.To(grovev1alpha1.WorkloadTypeInference),
				TrainingSpec: &grovev1alpha1.TrainingSpec{MaxRestarts: ptr.To[int32](1)}}},
			want: out{Type: "Inference", MaxRestarts: ptr.To[int32](1)}},
		{name: "a carrier that is not a number", pcs: grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			api.AnnotationWorkloadType: "Training", api.AnnotationMaxRestarts: "many"}}},
			want: out{Type: "Training", Err: true}},
		{name: "a negative budget", pcs: grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationMaxRestarts: "-1"}}},
			want: out{Err: true}},
		{name: "a zero runtime", pcs: grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationMaxRuntime: "0s"}}},
			want: out{Err: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, d, err := TrainingLimits(&tc.pcs)
			got := out{Type: WorkloadTypeOf(&tc.pcs), MaxRestarts: n, MaxRuntime: d, Err: err != nil}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if IsTrainingSet(&tc.pcs) != (tc.want.Type == "Training") {
				t.Errorf("IsTrainingSet = %v", IsTrainingSet(&tc.pcs))
			}
		})
	}
	if IsTrainingSet(nil) {
		t.Error("a nil set is not Training")
	}
}

func TestScalingGroupDelayOf(t *testing.T) {
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationTerminationDelay: "a=1s,b=2s"}}}
	pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "b", TerminationDelay: &metav1.Duration{Duration: time.Minute}}}
	g := &grovev1alpha1.PodCliqueScalingGroup{}
	for cfg, want := range map[string]*time.Duration{"a": ptr.To(time.Second), "b": ptr.To(time.Minute), "c": nil} {
		got, err := ScalingGroupDelayOf(pcs, g, cfg)
		if err != nil || !cmp.Equal(got, want) {
			t.Errorf("%s: got %v, %v; want %v", cfg, got, err, want)
		}
	}
	g.Spec.TerminationDelay = &metav1.Duration{Duration: time.Hour}
	if got, _ := ScalingGroupDelayOf(pcs, g, "a"); !cmp.Equal(got, ptr.To(time.Hour)) {
		t.Errorf("the PCSG's own field: got %v, want 1h", got)
	}
}

func TestUpdateInProgress(t *testing.T) {
	ended := metav1.NewTime(time.Unix(2, 0))
	running := &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(time.Unix(1, 0))}
	done := &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(time.Unix(1, 0)), UpdateEndedAt: &ended}
	tests := []struct {
		name         string
		seed, upstrm *grovev1alpha1.RollingUpdateProgress
		want         bool
	}{
		{name: "none"},
		{name: "seed rollingUpdateProgress", seed: running, want: true},
		{name: "Grove's updateProgress", upstrm: running, want: true},
		{name: "ended", seed: done, upstrm: done},
	}
	for _, tc := range tests {
		c := &grovev1alpha1.PodClique{Status: grovev1alpha1.PodCliqueStatus{RollingUpdateProgress: tc.seed, UpdateProgress: tc.upstrm}}
		if got := UpdateInProgress(c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// WasAvailable reads what an earlier shepherd kept on a PodClique, in
// either form, once, on upgrade (shepherd now keeps it in its records).
func TestWasAvailable(t *testing.T) {
	tests := []struct {
		name string
		c    grovev1alpha1.PodClique
		want bool
	}{
		{name: "the seed field", c: grovev1alpha1.PodClique{Status: grovev1alpha1.PodCliqueStatus{WasAvailable: true}}, want: true},
		{name: "the carrier", c: grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.AnnotationWasAvailable: "true"}}}, want: true},
		{name: "neither", c: grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"x": "y"}}}},
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
	st := TrainingStatus{Phase: grovev1alpha1.PhaseRunning, RestartCount: 2, StartTime: &start}
	type out struct {
		Phase        grovev1alpha1.PodCliqueSetPhase
		RestartCount int32
		StartTime    *metav1.Time
		Annotations  map[string]string
	}
	tests := []struct {
		name    string
		before  map[string]string
		schemas knob.FieldSchemas
		want    out
	}{
		{name: "seed: the fields", schemas: seed, want: out{Phase: "Running", RestartCount: 2, StartTime: &start}},
		{name: "seed: stale carriers are removed", schemas: seed, before: map[string]string{api.AnnotationRestartCount: "1", "x": "y"},
			want: out{Phase: "Running", RestartCount: 2, StartTime: &start, Annotations: map[string]string{"x": "y"}}},
		{name: "Grove: the carriers", schemas: fieldSchemas{}, want: out{Annotations: map[string]string{
			api.AnnotationTrainingPhase: "Running", api.AnnotationRestartCount: "2", api.AnnotationStartTime: "2026-01-01T12:00:00Z"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: tc.before}}
			SetTrainingStatus(pcs, st, tc.schemas)
			got := out{pcs.Status.Phase, pcs.Status.RestartCount, pcs.Status.StartTime, pcs.Annotations}
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
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		api.AnnotationTrainingPhase: "Done", api.AnnotationRestartCount: "x", api.AnnotationStartTime: "yesterday"}}}
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
	pcs.Status = grovev1alpha1.PodCliqueSetStatus{Phase: "Running", RestartCount: 1, StartTime: &metav1.Time{}}
	if _, err := TrainingStatusOf(pcs); err != nil {
		t.Errorf("fields set: %v", err)
	}
}
