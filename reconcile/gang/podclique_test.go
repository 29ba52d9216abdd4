package gang

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

func TestDecideCliqueStatus(t *testing.T) {
	earlier := t0.Add(-time.Hour)
	endedAt := metav1.NewTime(earlier)
	tests := []struct {
		name         string
		replicas     int32
		minAvailable *int32
		wasAvailable bool
		rolling      *grovev1alpha1.RollingUpdateProgress
		training     bool
		marker       *RestartMarker
		existing     []metav1.Condition
		pods         []podState

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
		{name: "restart marker: named pods do not count and wasAvailable is held false", replicas: 2, wasAvailable: true, training: true,
			marker: &RestartMarker{Restart: 1, Pods: []types.UID{"uid-0", "uid-1"}}, pods: []podState{ready, ready},
			wantReady: 0, wantWas: false, wantStatus: metav1.ConditionFalse, wantReason: api.ReasonNeverAvailable, wantLTT: t0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &grovev1alpha1.PodClique{
				ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 3},
				Spec:       grovev1alpha1.PodCliqueSpec{Replicas: tc.replicas, MinAvailable: tc.minAvailable},
				Status: grovev1alpha1.PodCliqueStatus{WasAvailable: tc.wasAvailable, RollingUpdateProgress: tc.rolling,
					Conditions: append([]metav1.Condition{{Type: "Other", Status: metav1.ConditionTrue, Reason: "Kept"}}, tc.existing...)},
			}
			got := DecideCliqueStatus(clocktesting.NewFakePassiveClock(t0), CliqueInput{Clique: c, Pods: mkPods(tc.pods...), Training: tc.training, Marker: tc.marker})
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
			if !got.Changed(c) && tc.existing == nil {
				t.Errorf("Changed = false for a clique without the condition")
			}
		})
	}
}

func TestCliqueStatusChanged(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	c := &grovev1alpha1.PodClique{Spec: grovev1alpha1.PodCliqueSpec{Replicas: 1}}
	first := DecideCliqueStatus(clk, CliqueInput{Clique: c, Pods: mkPods(ready)})
	c.Status.ReadyReplicas, c.Status.WasAvailable, c.Status.Conditions = first.ReadyReplicas, first.WasAvailable, first.Conditions
	clk.SetTime(t0.Add(time.Minute))
	if again := DecideCliqueStatus(clk, CliqueInput{Clique: c, Pods: mkPods(ready)}); again.Changed(c) {
		t.Errorf("a second decision on the same state reports a change: %+v", again)
	}
	if lost := DecideCliqueStatus(clk, CliqueInput{Clique: c, Pods: mkPods(notReady)}); !lost.Changed(c) {
		t.Errorf("losing the only ready pod reports no change")
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
