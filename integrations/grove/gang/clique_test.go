package gang

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

func TestDecideClique(t *testing.T) {
	earlier := t0.Add(-time.Hour)
	endedAt := metav1.NewTime(earlier)
	tests := []struct {
		name         string
		replicas     int32
		minAvailable *int32
		// wasAvailable is the seed field status.wasAvailable.
		wasAvailable bool
		// wasCarrier sets wasAvailable through its carrier annotation, as on
		// Grove's schema, instead of the seed field.
		wasCarrier bool
		// rolling is the seed's status.rollingUpdateProgress (its
		// updateStartedAt and updateEndedAt).
		rolling *grovev1alpha1.PodCliqueUpdateProgress
		// groveUpdate is Grove's status.updateProgress.
		groveUpdate *grovev1alpha1.PodCliqueUpdateProgress
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
		{name: "rolling update: unknown", replicas: 2, wasAvailable: true, rolling: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionUnknown, wantReason: api.ReasonUpdateInProgress, wantLTT: t0},
		{name: "never available wins over rolling update", replicas: 2, rolling: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
		{name: "no wasAvailable during a rolling update", replicas: 2, rolling: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready, ready},
			wantReady: 2, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonSufficientReadyPods, wantLTT: t0},
		{name: "finished rolling update is no rolling update", replicas: 2, wasAvailable: true, rolling: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier), UpdateEndedAt: &endedAt}, pods: []podState{ready},
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
		{name: "Grove's updateProgress is a rolling update", replicas: 2, wasCarrier: true, groveUpdate: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier)}, pods: []podState{ready},
			wantReady: 1, wantWas: true, wantStatus: metav1.ConditionUnknown, wantReason: api.ReasonUpdateInProgress, wantLTT: t0},
		{name: "Grove's finished updateProgress is none", replicas: 2, wasCarrier: true, groveUpdate: &grovev1alpha1.PodCliqueUpdateProgress{UpdateStartedAt: metav1.NewTime(earlier), UpdateEndedAt: &endedAt}, pods: []podState{ready},
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
				Status: grovev1alpha1.PodCliqueStatus{UpdateProgress: tc.groveUpdate,
					Conditions: append([]metav1.Condition{{Type: "Other", Status: metav1.ConditionTrue, Reason: "Kept"}}, tc.existing...)},
			}
			if tc.wasCarrier {
				c.Annotations = map[string]string{api.AnnotationWasAvailable: "true"}
			}
			cl := grove.CliqueOf(c)
			if tc.wasAvailable {
				setServed(t, cl.Served, true, "status", "wasAvailable")
			}
			if p := tc.rolling; p != nil {
				seed := map[string]any{"updateStartedAt": p.UpdateStartedAt.UTC().Format(time.RFC3339)}
				if p.UpdateEndedAt != nil {
					seed["updateEndedAt"] = p.UpdateEndedAt.UTC().Format(time.RFC3339)
				}
				setServed(t, cl.Served, seed, "status", "rollingUpdateProgress")
			}
			var since *metav1.Time
			if len(tc.existing) > 0 && tc.existing[0].Status == metav1.ConditionTrue {
				since = &tc.existing[0].LastTransitionTime
			}
			got := DecideClique(CliqueInput{Clique: &cl, Pods: mkPods(tc.pods...), Training: tc.training, Marker: tc.marker, Last: tc.last}, since, t0.Add(300*time.Millisecond))
			if got.Ready != tc.wantReady || got.WasAvailable != tc.wantWas {
				t.Errorf("ready, wasAvailable = %d, %v; want %d, %v", got.Ready, got.WasAvailable, tc.wantReady, tc.wantWas)
			}
			if got.Reason() != tc.wantReason {
				t.Errorf("reason = %s, want %s", got.Reason(), tc.wantReason)
			}
			breached := tc.wantStatus == metav1.ConditionTrue
			if got.Breached() != breached || (got.BreachedSince != nil) != breached {
				t.Errorf("Breached() = %v, breachedSince %v; want breached %v", got.Breached(), got.BreachedSince, breached)
			}
			// A breach starts at the second it is first seen and keeps
			// that start while it lasts.
			if breached && !got.BreachedSince.Time.Equal(tc.wantLTT) {
				t.Errorf("breachedSince = %v, want %v", got.BreachedSince, tc.wantLTT)
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
