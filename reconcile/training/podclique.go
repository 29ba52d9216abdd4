package training

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
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// CliqueSucceeded reports whether a PodClique has the Succeeded condition.
func CliqueSucceeded(c *grovev1alpha1.PodClique) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, api.ConditionSucceeded)
}

// DecideCliqueSucceeded returns the clique's conditions with Succeeded=True
// once all of its pods exited 0 — at least spec.replicas of them (one when
// replicas is 0), none still running or failed; pods named by a restart marker
// belong to the previous attempt and are not counted. The condition is sticky:
// once written it survives the pods' cleanup. changed is false when there is
// nothing to write.
func DecideCliqueSucceeded(clk clock.PassiveClock, c *grovev1alpha1.PodClique, pods []corev1.Pod, marker *gang.RestartMarker) (conds []metav1.Condition, changed bool) {
	if CliqueSucceeded(c) {
		return c.Status.Conditions, false
	}
	var done int32
	for i := range pods {
		p := &pods[i]
		if marker.Condemned(p.UID) {
			continue
		}
		if !gang.PodSucceeded(p) {
			return c.Status.Conditions, false
		}
		done++
	}
	if done == 0 || done < c.Spec.Replicas {
		return c.Status.Conditions, false
	}
	return gang.SetCondition(c.Status.Conditions, metav1.Condition{
		Type: api.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: api.ReasonAllPodsSucceeded,
		Message: fmt.Sprintf("all %d pods exited 0", done), ObservedGeneration: c.Generation,
	}, clk.Now()), true
}

// DecideClique is the Training PodClique decision: the clique as it should
// be — its Succeeded condition (DecideCliqueSucceeded; the pods of its last
// restart, done or not, never count, even lingering in Terminating) and its
// wasAvailable, the restart gate (gang.CliqueAvailability, held false while
// a restart marker is active), kept here whatever enforces gang
// termination, in the form the served schema keeps it. succeeded reports
// that Succeeded is new. A marker that does not parse counts as none.
func DecideClique(clk clock.PassiveClock, c *grovev1alpha1.PodClique, pods []corev1.Pod, schemas knob.FieldSchemas) (want *grovev1alpha1.PodClique, succeeded bool) {
	active, _ := gang.ActiveMarker(c.Annotations)
	last, _ := gang.Marker(c.Annotations)
	want = c.DeepCopy()
	want.Status.Conditions, succeeded = DecideCliqueSucceeded(clk, c, pods, last)
	a := gang.CliqueAvailability(gang.CliqueInput{Clique: c, Pods: pods, Training: true, Marker: active, Last: last})
	grove.SetWasAvailable(want, a.WasAvailable, schemas)
	return want, succeeded
}
