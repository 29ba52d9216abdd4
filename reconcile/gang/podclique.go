package gang

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// CliqueInput is what the PodClique status decision reads.
type CliqueInput struct {
	Clique *grovev1alpha1.PodClique
	// Pods are the pods the PodClique owns.
	Pods []corev1.Pod
	// Training is true when the owning PodCliqueSet has workloadType Training.
	Training bool
	// Marker is the clique's active restart marker (package training), or
	// nil.
	Marker *RestartMarker
	// Last is the clique's last restart marker, done or not, or nil: the
	// pods it names belong to an earlier attempt and never count, even
	// while they linger in Terminating after the restart is done.
	Last *RestartMarker
	// WasAvailable is the sticky bit as kept before this observation; nil
	// reads it from the PodClique (grove.WasAvailable). Package training
	// keeps it in the set's WorkloadRecord.
	WasAvailable *bool
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

// Availability is what a PodClique's pods say about it: the input of its
// MinAvailableBreached, and of package training's own breach detection.
type Availability struct {
	// Ready counts pods that are Ready, not terminating and not exited:
	// readyReplicas.
	Ready int32
	// Available is Ready plus — for Training only — pods that exited 0:
	// they finished their work and are not recreated.
	Available    int32
	MinAvailable int32
	// Rolling is true while a rolling update is in progress.
	Rolling bool
	// WasAvailable is the sticky bit after this observation.
	WasAvailable bool
	// FailedBeforeAvailable is set, for Training only, when the clique was
	// never available and more of its pods failed (phase Failed or a
	// container exited non-zero; restartPolicy Never, so the kubelet will
	// not bring them back) than replicas − minAvailable allows: the clique
	// can no longer start, which is a failure, not a slow start (GREP-0285:
	// a failure restarts the replica or fails the workload).
	FailedBeforeAvailable bool
}

// CliqueAvailability counts a clique's pods. Pods named by a restart marker
// count for nothing. wasAvailable is sticky (read through its carrier),
// set only outside a rolling update, and held false while a restart marker
// is present (the restarted replica is starting afresh).
func CliqueAvailability(in CliqueInput) Availability {
	c := in.Clique
	var ready, succeeded, failed int32
	for i := range in.Pods {
		p := &in.Pods[i]
		if in.Marker.Condemned(p.UID) || in.Last.Condemned(p.UID) {
			continue
		}
		switch {
		case PodReady(p):
			ready++
		case in.Training && p.DeletionTimestamp == nil && PodSucceeded(p):
			succeeded++
		case in.Training && PodFailed(p):
			// Counted even while being deleted: whoever deletes a failed
			// pod to replace it must not hide the failure.
			failed++
		}
	}
	a := Availability{Ready: ready, Available: ready + succeeded, MinAvailable: MinAvailable(c), Rolling: grove.UpdateInProgress(c)}
	a.WasAvailable = grove.WasAvailable(c)
	if in.WasAvailable != nil {
		a.WasAvailable = *in.WasAvailable
	}
	switch {
	case in.Marker != nil:
		a.WasAvailable = false
	case a.Available >= a.MinAvailable && !a.Rolling:
		a.WasAvailable = true
	}
	a.FailedBeforeAvailable = in.Training && !a.WasAvailable && failed > max(0, c.Spec.Replicas-a.MinAvailable)
	return a
}

// Breached reports whether the clique is breached: below minAvailable after
// having been available, outside a rolling update (MinAvailableBreached
// True, step 4 of DecideCliqueStatus) — or, for Training, below
// minAvailable because its pods failed before it was ever available
// (FailedBeforeAvailable).
func (a Availability) Breached() bool {
	return a.Available < a.MinAvailable && (a.WasAvailable || a.FailedBeforeAvailable) && !a.Rolling
}

// DecideCliqueStatus computes readyReplicas, wasAvailable and
// MinAvailableBreached, in the design's order:
//  1. available ≥ minAvailable → False/SufficientReadyPods;
//  2. never available → False/NeverAvailable, unless (Training) pods
//     failed before it ever was (FailedBeforeAvailable) → step 4;
//  3. rolling update in progress → Unknown/UpdateInProgress;
//  4. otherwise → True/InsufficientReadyPods.
//
// See CliqueAvailability for what counts.
func DecideCliqueStatus(clk clock.PassiveClock, in CliqueInput) CliqueStatus {
	c := in.Clique
	a := CliqueAvailability(in)
	available, minAvailable := a.Available, a.MinAvailable
	cond := metav1.Condition{Type: api.ConditionMinAvailableBreached, ObservedGeneration: c.Generation}
	switch {
	case available >= minAvailable:
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonSufficientReadyPods
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available", available, minAvailable)
	case !a.WasAvailable && !a.FailedBeforeAvailable:
		cond.Status, cond.Reason = metav1.ConditionFalse, api.ReasonNeverAvailable
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available; the clique has not been available yet, so this is not a breach", available, minAvailable)
	case a.Rolling:
		cond.Status, cond.Reason = metav1.ConditionUnknown, api.ReasonUpdateInProgress
		cond.Message = "a rolling update is in progress; breach detection is suspended"
	case a.FailedBeforeAvailable:
		cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonInsufficientReadyPods
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available; pods failed before the clique was ever available", available, minAvailable)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, api.ReasonInsufficientReadyPods
		cond.Message = fmt.Sprintf("%d of minAvailable %d pods available", available, minAvailable)
	}
	return CliqueStatus{
		ReadyReplicas: a.Ready,
		WasAvailable:  a.WasAvailable,
		Conditions:    SetCondition(c.Status.Conditions, cond, clk.Now()),
	}
}

// Breached reports whether s says the clique is breached now
// (MinAvailableBreached True).
func (s CliqueStatus) Breached() bool {
	return meta.IsStatusConditionTrue(s.Conditions, api.ConditionMinAvailableBreached)
}

// Apply returns a copy of c carrying s: readyReplicas, the conditions and,
// when ownWas, wasAvailable in the form the served schema keeps it (the
// status field, or the carrier annotation on Grove's schema). A Training
// clique's wasAvailable is package training's to write (its restart gate),
// so gang passes ownWas false for those.
func (s CliqueStatus) Apply(c *grovev1alpha1.PodClique, ownWas bool, schemas knob.FieldSchemas) *grovev1alpha1.PodClique {
	out := c.DeepCopy()
	out.Status.ReadyReplicas, out.Status.Conditions = s.ReadyReplicas, s.Conditions
	if ownWas {
		grove.SetWasAvailable(out, s.WasAvailable, schemas)
	}
	return out
}
