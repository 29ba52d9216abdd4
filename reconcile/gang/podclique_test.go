package gang

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

func TestDecideCliqueStatus(t *testing.T) {
	earlier := t0.Add(-time.Hour)
	endedAt := metav1.NewTime(earlier)
	tests := []struct {
		name         string
		replicas     int32
		minAvailable *int32
		wasAvailable bool
		// wasCarrier sets wasAvailable through its carrier annotation, as on
		// Grove's schema, instead of the seed field.
		wasCarrier bool
		rolling    *grovev1alpha1.RollingUpdateProgress
		// groveUpdate is Grove's status.updateProgress.
		groveUpdate *grovev1alpha1.RollingUpdateProgress
		training    bool
		marker      *RestartMarker
		last        *RestartMarker
		existing    []metav1.Condition
		pods        []podState

		wantReady  int32
		wantWas    bool
		wantStatus metav1.ConditionStatus
		wantReason string
		wantLTT    time.Time
	}{
		{name: "all ready: sufficient, becomes available", replicas: 2, pods: []podState{ready, ready},
			wantReady: 2, wantWas: true, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "minAvailable defaults to replicas", replicas: 3, wasAvailable: true, pods: []podState{ready, ready, notReady},
			wantReady: 2, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "never available: starting pods are no breach", replicas: 4, pods: []podState{ready, notReady, notReady, notReady},
			wantReady: 1, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		// Issue 19, defect 9a: a Training clique whose pods fail before it
		// was ever available has failed, not started slowly.
		{name: "defect 9a: Training, never available, a pod failed: breached", replicas: 2, training: true, pods: []podState{ready, exited1},
			wantReady: 1, wantWas: false, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "defect 9a: Training, never available, failures within replicas-minAvailable: still starting", replicas: 3, minAvailable: ptr.To[int32](2),
			training: true, pods: []podState{notReady, notReady, exited1},
			wantReady: 0, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		{name: "defect 9a: Training, a failed pod already being deleted still counts", replicas: 2, training: true, pods: []podState{notReady, exited1Terminating},
			wantReady: 0, wantWas: false, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "defect 9a: Training, the failed pods of the last restart do not count", replicas: 2, training: true,
			last: &RestartMarker{Restart: 1, Pods: []types.UID{"uid-1"}, Done: true}, pods: []podState{notReady, exited1},
			wantReady: 0, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		{name: "defect 9a: Inference keeps the startup protection", replicas: 2, pods: []podState{ready, exited1},
			wantReady: 1, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		{name: "was available then lost a pod: breached", replicas: 2, wasAvailable: true, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "terminating pods are not ready", replicas: 2, wasAvailable: true, pods: []podState{ready, terminating},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "lost a pod but minAvailable still met", replicas: 2, minAvailable: ptr.To[int32](1), wasAvailable: true, pods: []podState{ready, notReady},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "rolling update: unknown", replicas: 2, wasAvailable: true, rolling: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionUnknown, wantReason: api.ReasonUpdateInProgress, wantLTT: t0},
		{name: "never available wins over rolling update", replicas: 2, rolling: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		{name: "no wasAvailable during a rolling update", replicas: 2, rolling: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready, ready},
			wantReady: 2, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "finished rolling update is no rolling update", replicas: 2, wasAvailable: true, rolling: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier), UpdateEndedAt: &endedAt}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "sticky wasAvailable survives losing every pod", replicas: 2, wasAvailable: true,
			wantReady: 0, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "unchanged status keeps lastTransitionTime", replicas: 2, wasAvailable: true, existing: []metav1.Condition{breachedCond(metav1.ConditionTrue, earlier)}, pods: []podState{notReady},
			wantReady: 0, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: earlier},
		{name: "transition moves lastTransitionTime", replicas: 2, wasAvailable: true, existing: []metav1.Condition{breachedCond(metav1.ConditionTrue, earlier)}, pods: []podState{ready, ready},
			wantReady: 2, wantWas: true, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "inference: exited pods are lost", replicas: 2, wasAvailable: true, pods: []podState{ready, exited0},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "training: exited 0 counts as available", replicas: 2, wasAvailable: true, training: true, pods: []podState{ready, exited0},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "training: exited 1 is a breach", replicas: 2, wasAvailable: true, training: true, pods: []podState{ready, exited1},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "carrier: wasAvailable from the annotation, then lost a pod: breached", replicas: 2, wasCarrier: true, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "Grove's updateProgress is a rolling update", replicas: 2, wasCarrier: true, groveUpdate: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionUnknown, wantReason: api.ReasonUpdateInProgress, wantLTT: t0},
		{name: "Grove's finished updateProgress is none", replicas: 2, wasCarrier: true, groveUpdate: &grovev1alpha1.RollingUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier), UpdateEndedAt: &endedAt}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionTrue, wantReason: api.ReasonInsufficientReadyPods, wantLTT: t0},
		{name: "restart marker: named pods do not count and wasAvailable is held false", replicas: 2, wasAvailable: true, training: true,
			marker: &RestartMarker{Restart: 1, Pods: []types.UID{"uid-0", "uid-1"}}, pods: []podState{ready, ready},
			wantReady: 0, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &grovev1alpha1.PodClique{
				ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 3},
				Spec:       grovev1alpha1.PodCliqueSpec{Replicas: tc.replicas, MinAvailable: tc.minAvailable},
				Status: grovev1alpha1.PodCliqueStatus{WasAvailable: tc.wasAvailable, RollingUpdateProgress: tc.rolling, UpdateProgress: tc.groveUpdate,
					Conditions: append([]metav1.Condition{{Type: "Other", Status: metav1.ConditionTrue, Reason: "Kept"}}, tc.existing...)},
			}
			if tc.wasCarrier {
				c.Annotations = map[string]string{api.AnnotationWasAvailable: "true"}
			}
			got := DecideCliqueStatus(clocktesting.NewFakePassiveClock(t0), CliqueInput{Clique: c, Pods: mkPods(tc.pods...), Training: tc.training, Marker: tc.marker, Last: tc.last})
			if got.ReadyReplicas != tc.wantReady || got.WasAvailable != tc.wantWas {
				t.Errorf("ready, wasAvailable = %d, %v; want %d, %v", got.ReadyReplicas, got.WasAvailable, tc.wantReady, tc.wantWas)
			}
			cond := meta.FindStatusCondition(got.Conditions, api.ConditionMinAvailableBreached)
			if cond == nil {
				t.Fatalf("no %s condition in %+v", api.ConditionMinAvailableBreached, got.Conditions)
			}
			if cond.Status != tc.wantStatus || cond.Reason != tc.wantReason || !cond.LastTransitionTime.Time.Equal(tc.wantLTT) {
				t.Errorf("condition = %s/%s at %v; want %s/%s at %v", cond.Status, cond.Reason, cond.LastTransitionTime, tc.wantStatus, tc.wantReason, tc.wantLTT)
			}
			if cond.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", cond.ObservedGeneration)
			}
			if other := meta.FindStatusCondition(got.Conditions, "Other"); other == nil || other.Reason != "Kept" {
				t.Errorf("another controller's condition was dropped: %+v", got.Conditions)
			}
			if got.Breached() != (tc.wantStatus == metav1.ConditionTrue) {
				t.Errorf("Breached() = %v with condition %s", got.Breached(), cond.Status)
			}
		})
	}
}

// fieldSchemas is a served schema that has the given field paths
// (knob.FieldSchemas); nil paths is Grove's schema, which has none of the
// seed status fields.
type fieldSchemas []string

func (f fieldSchemas) HasField(_ schema.GroupKind, path []string) bool {
	return slices.Contains(f, strings.Join(path, "."))
}

// The seed schema keeps wasAvailable in status, Grove's in the carrier; a
// Training clique's is not gang's to write; a second decision on the same
// state writes nothing.
func TestCliqueStatusApply(t *testing.T) {
	seed := fieldSchemas{"status.wasAvailable"}
	type out struct {
		Ready       int32
		WasField    bool
		Annotations map[string]string
	}
	tests := []struct {
		name    string
		schemas knob.FieldSchemas
		ownWas  bool
		before  map[string]string
		was     bool
		pods    []podState
		want    out
	}{
		{name: "seed schema: the field", schemas: seed, ownWas: true, pods: []podState{ready},
			want: out{Ready: 1, WasField: true}},
		{name: "Grove's schema: the carrier", schemas: fieldSchemas{}, ownWas: true, pods: []podState{ready},
			want: out{Ready: 1, Annotations: map[string]string{api.AnnotationWasAvailable: "true"}}},
		{name: "no schema known: the carrier", schemas: nil, ownWas: true, pods: []podState{ready},
			want: out{Ready: 1, Annotations: map[string]string{api.AnnotationWasAvailable: "true"}}},
		{name: "other annotations are kept", schemas: fieldSchemas{}, ownWas: true, before: map[string]string{"a": "b"}, pods: []podState{ready},
			want: out{Ready: 1, Annotations: map[string]string{"a": "b", api.AnnotationWasAvailable: "true"}}},
		{name: "training clique: wasAvailable is training's", schemas: fieldSchemas{}, ownWas: false, pods: []podState{ready},
			want: out{Ready: 1}},
		{name: "carrier stays once set", schemas: fieldSchemas{}, ownWas: true, before: map[string]string{api.AnnotationWasAvailable: "true"}, pods: []podState{notReady},
			want: out{Ready: 0, Annotations: map[string]string{api.AnnotationWasAvailable: "true"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			c := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Annotations: tc.before}, Spec: grovev1alpha1.PodCliqueSpec{Replicas: 1}}
			got := DecideCliqueStatus(clk, CliqueInput{Clique: c, Pods: mkPods(tc.pods...)}).Apply(c, tc.ownWas, tc.schemas)
			if diff := cmp.Diff(tc.want, out{got.Status.ReadyReplicas, got.Status.WasAvailable, got.Annotations}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("applied (-want +got):\n%s", diff)
			}
			if cond := meta.FindStatusCondition(got.Status.Conditions, api.ConditionMinAvailableBreached); cond == nil {
				t.Errorf("no MinAvailableBreached in %+v", got.Status.Conditions)
			}
			if c.Annotations != nil && len(c.Annotations) != len(tc.before) {
				t.Errorf("Apply changed the cached object's annotations: %v", c.Annotations)
			}
			clk.SetTime(t0.Add(time.Minute))
			again := DecideCliqueStatus(clk, CliqueInput{Clique: got, Pods: mkPods(tc.pods...)}).Apply(got, tc.ownWas, tc.schemas)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("a second decision on the same state changes (-first +second):\n%s", diff)
			}
		})
	}
}

func TestMarker(t *testing.T) {
	m, err := Marker(map[string]string{api.AnnotationRestart: RestartMarker{Restart: 2, Pods: []types.UID{"a"}}.String()})
	if err != nil || m.Restart != 2 || !m.Condemned("a") || m.Condemned("b") {
		t.Fatalf("round trip: %+v, %v", m, err)
	}
	if m, err := Marker(nil); m != nil || err != nil {
		t.Errorf("no annotation: %+v, %v", m, err)
	}
	if _, err := Marker(map[string]string{api.AnnotationRestart: "nope"}); err == nil {
		t.Errorf("a malformed marker parsed")
	}
}
