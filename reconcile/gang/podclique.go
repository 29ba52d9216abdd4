package gang

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// CliqueInput is what the PodClique status decision reads.
type CliqueInput struct {
	Clique *grovev1alpha1.PodClique
	// Pods are the pods the PodClique owns.
	Pods []corev1.Pod
	// Training is true when the owning PodCliqueSet has workloadType Training.
	Training bool
	// Marker is the clique's restart marker (package training), or nil.
	Marker *RestartMarker
}

// CliqueStatus is the part of PodClique status shepherd owns.
type CliqueStatus struct {
	ReadyReplicas int32
	WasAvailable  bool
	// Conditions is the clique's conditions list with MinAvailableBreached
	// set; every other condition is kept as it was.
	Conditions []metav1.Condition
}

// MinAvailable is a PodClique's minAvailable, defaulting to its replicas
// (D-PCS-6) when the webhook did not set it.
func MinAvailable(c *grovev1alpha1.PodClique) int32 {
	if c.Spec.MinAvailable != nil {
		return *c.Spec.MinAvailable
	}
	return c.Spec.Replicas
}

// RollingUpdate reports whether a rolling update of c is in progress.
func RollingUpdate(c *grovev1alpha1.PodClique) bool {
	p := c.Status.RollingUpdateProgress
	return p != nil && p.UpdateEndedAt == nil
}

// DecideCliqueStatus computes readyReplicas, wasAvailable and
// MinAvailableBreached, in the design's order:
//  1. available ≥ minAvailable → False/SufficientReadyPods;
//  2. never available → False/NeverAvailable;
//  3. rolling update in progress → Unknown/UpdateInProgress;
//  4. otherwise → True/InsufficientReadyPods.
//
// readyReplicas counts pods that are Ready, not terminating and not exited.
// "Available" is readyReplicas, plus — for Training only — pods that exited 0:
// they finished their work and Grove does not recreate them. Pods named by a
// restart marker count for neither. wasAvailable is sticky, set only outside a
// rolling update, and held false while a restart marker is present (the
// restarted replica is starting afresh).
func DecideCliqueStatus(clk clock.PassiveClock, in CliqueInput) CliqueStatus {
	c := in.Clique
	var ready, succeeded int32
	for i := range in.Pods {
		p := &in.Pods[i]
		if in.Marker.Condemned(p.UID) {
			continue
		}
		if PodReady(p) {
			ready++
		} else if in.Training && p.DeletionTimestamp == nil && PodSucceeded(p) {
			succeeded++
		}
	}
	available := ready + succeeded
	minAvailable := MinAvailable(c)
	rolling := RollingUpdate(c)

	was := c.Status.WasAvailable
	switch {
	case in.Marker != nil:
		was = false
	case available >= minAvailable && !rolling:
		was = true
	}

	cond := metav1.Condition{Type: api.ConditionMinAvailableBreached, ObservedGeneration: c.Generation}
	switch {
	case available >= minAvailable:
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonSufficientReadyPods
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available", available, minAvailable)
	case !was:
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonNeverAvailable
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available; the clique has not been available yet, so this is not a breach", available, minAvailable)
	case rolling:
		cond.Status, cond.Reason = metav1.ConditionUnknown, api.ReasonUpdateInProgress
		cond.Message = "a rolling update is in progress; breach detection is suspended"
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonInsufficientReadyPods
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available", available, minAvailable)
	}
	return CliqueStatus{
		ReadyReplicas: ready,
		WasAvailable:  was,
		Conditions:    SetCondition(c.Status.Conditions, cond, clk.Now()),
	}
}

// Changed reports whether s differs from what c's status already says.
func (s CliqueStatus) Changed(c *grovev1alpha1.PodClique) bool {
	if s.ReadyReplicas != c.Status.ReadyReplicas || s.WasAvailable != c.Status.WasAvailable {
		return true
	}
	return !conditionEqual(meta.FindStatusCondition(s.Conditions, api.ConditionMinAvailableBreached),
		meta.FindStatusCondition(c.Status.Conditions, api.ConditionMinAvailableBreached))
}
