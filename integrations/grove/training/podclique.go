package training

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

// CliqueSucceeded reports whether a PodClique's pods all exited 0 — at
// least spec.replicas of them (one when replicas is 0), none still running
// or failed; pods named by the clique's last restart marker belong to the
// previous attempt and are not counted.
func CliqueSucceeded(c *grove.Clique, pods []corev1.Pod, marker *gang.RestartMarker) bool {
	var done int32
	for i := range pods {
		p := &pods[i]
		if marker.Condemned(p.UID) {
			continue
		}
		if !gang.PodSucceeded(p) {
			return false
		}
		done++
	}
	return done > 0 && done >= c.Spec.Replicas
}

// DecideClique is what shepherd keeps about a Training PodClique, from its
// pods and what it kept before (e): Succeeded, sticky (CliqueSucceeded),
// and wasAvailable, the restart gate (gang.CliqueAvailability: sticky,
// held false while a restart marker is active so a restarted replica gets
// the startup protection of a new one), kept whatever enforces gang
// termination, since Grove keeps no such bit.
func DecideClique(c *grove.Clique, pods []corev1.Pod, e CliqueState) (wasAvailable, succeeded bool) {
	var active *gang.RestartMarker
	if e.Marker != nil && !e.Marker.Done {
		active = e.Marker
	}
	succeeded = e.Succeeded || CliqueSucceeded(c, pods, e.Marker)
	was := e.WasAvailable
	a := gang.CliqueAvailability(gang.CliqueInput{Clique: c, Pods: pods, Training: true, Marker: active, Last: e.Marker, WasAvailable: &was})
	return a.WasAvailable, succeeded
}
