package gang

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// CliqueInput is what a PodClique's decision reads.
type CliqueInput struct {
	Clique *grove.Clique
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
	// WasAvailable is the sticky bit as kept before this observation, in
	// the set's WorkloadRecord; nil reads what an earlier shepherd kept on
	// the PodClique (grove.WasAvailable), once, on upgrade.
	WasAvailable *bool
}

// MinAvailable is a PodClique's minAvailable, defaulting to its replicas
// (D-PCS-6) when the webhook did not set it.
func MinAvailable(c *grove.Clique) int32 {
	if c.Spec.MinAvailable != nil {
		return *c.Spec.MinAvailable
	}
	return c.Spec.Replicas
}

// Availability is what a PodClique's pods say about it: the input of gang
// termination's breach, and of package training's own breach detection.
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
// step 4 of DecideClique) — or, for Training, below
// minAvailable because its pods failed before it was ever available
// (FailedBeforeAvailable).
func (a Availability) Breached() bool {
	return a.Available < a.MinAvailable && (a.WasAvailable || a.FailedBeforeAvailable) && !a.Rolling
}

// CliqueDecision is what shepherd keeps about one PodClique of an
// Inference set, and how it reads now.
type CliqueDecision struct {
	// Availability carries the sticky wasAvailable after this observation.
	Availability
	// BreachedSince is when the current breach began; nil when the clique
	// is not breached.
	BreachedSince *metav1.Time
}

// DecideClique computes a clique's sticky wasAvailable and the start of its
// breach, in the design's order:
//  1. available ≥ minAvailable → not breached;
//  2. never available → not breached (NeverAvailable: a gang still
//     starting is never terminated);
//  3. rolling update in progress → not breached (breach detection is
//     suspended, and the delay starts afresh after it);
//  4. otherwise → breached, since the breach was first seen (kept from
//     since; now, truncated to the second, for a new breach).
//
// since is the breach start kept before this observation (nil: none). See
// CliqueAvailability for what counts.
func DecideClique(in CliqueInput, since *metav1.Time, now time.Time) CliqueDecision {
	d := CliqueDecision{Availability: CliqueAvailability(in)}
	if d.Breached() {
		d.BreachedSince = since
		if since == nil || since.IsZero() {
			t := metav1.NewTime(now.Truncate(time.Second))
			d.BreachedSince = &t
		}
	}
	return d
}

// Reason is the design's word for the clique's state: SufficientReadyPods,
// NeverAvailable, UpdateInProgress or InsufficientReadyPods.
func (a Availability) Reason() string {
	switch {
	case a.Available >= a.MinAvailable:
		return api.ReasonSufficientReadyPods
	case !a.WasAvailable && !a.FailedBeforeAvailable:
		return api.ReasonNeverAvailable
	case a.Rolling:
		return api.ReasonUpdateInProgress
	}
	return api.ReasonInsufficientReadyPods
}
