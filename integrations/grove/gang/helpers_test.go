package gang

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type podState int

const (
	ready podState = iota
	notReady
	terminating
	exited0
	exited1
	exited1Terminating
)

func mkPods(states ...podState) []corev1.Pod {
	var out []corev1.Pod
	for i, s := range states {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		switch s {
		case ready, terminating:
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			if s == terminating {
				p.DeletionTimestamp = &metav1.Time{Time: t0}
			}
		case notReady:
			p.Status.Phase = corev1.PodPending
		case exited0, exited1, exited1Terminating:
			code := int32(0)
			p.Status.Phase = corev1.PodSucceeded
			if s == exited1Terminating {
				p.DeletionTimestamp = &metav1.Time{Time: t0}
			}
			if s != exited0 {
				code = 1
				p.Status.Phase = corev1.PodFailed
			}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
		}
		out = append(out, p)
	}
	return out
}

func breachedCond(status metav1.ConditionStatus, since time.Time) metav1.Condition {
	reason := api.ReasonInsufficientReadyPods
	if status == metav1.ConditionFalse {
		reason = api.ReasonSufficientReadyPods
	}
	return metav1.Condition{Type: api.ConditionMinAvailableBreached, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(since)}
}

// clique builds a PodClique of a PodCliqueSet replica; pcsg "" is standalone.
// It has been available (wasAvailable, kept through its carrier annotation).
func clique(name string, pcsIdx int, pcsg string, pcsgIdx int, conds ...metav1.Condition) grovev1alpha1.PodClique {
	c := grovev1alpha1.PodClique{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{
			api.LabelPartOf:                   "pcs",
			api.LabelPodCliqueSetReplicaIndex: fmt.Sprint(pcsIdx),
		}, Annotations: map[string]string{api.AnnotationWasAvailable: "true"}},
		Spec:   grovev1alpha1.PodCliqueSpec{Replicas: 2, MinAvailable: ptr.To[int32](2)},
		Status: grovev1alpha1.PodCliqueStatus{Conditions: conds},
	}
	if pcsg != "" {
		c.Labels[api.LabelPodCliqueScalingGroup] = pcsg
		c.Labels[api.LabelPodCliqueScalingGroupReplica] = fmt.Sprint(pcsgIdx)
	}
	return c
}

// unavailable is c with no wasAvailable kept on it.
func unavailable(c grovev1alpha1.PodClique) grovev1alpha1.PodClique {
	c.Annotations = maps.Clone(c.Annotations)
	delete(c.Annotations, api.AnnotationWasAvailable)
	return c
}

// breachesOf reads each live clique's breach start from its own
// MinAvailableBreached, the way an earlier shepherd kept it (legacyBreach):
// the tables below state breach times as conditions.
func breachesOf(cliques []grove.Clique) BreachTimes {
	out := BreachTimes{}
	for i := range cliques {
		if t, ok := legacyBreach(&cliques[i]); ok && !Terminating(&cliques[i]) {
			out[cliques[i].UID] = t.Time
		}
	}
	return out
}

// gangs runs step 3 of Decide (expiredGangs) at t0: the PodCliqueSet
// replicas and the scaling-group replicas it terminates, and the requeue.
func gangs(pcs *grove.Set, cliques []grove.Clique, groups []grove.ScalingGroup) (setKill, groupKill []int32, requeue time.Duration) {
	var wait MinRequeue
	for _, t := range expiredGangs(SetInput{Set: pcs, Cliques: cliques, Groups: groups}, breachesOf(cliques), t0, &wait) {
		if t.Level == LevelPCS {
			setKill = append(setKill, t.Replica)
		} else {
			groupKill = append(groupKill, t.Replica)
		}
	}
	return setKill, groupKill, time.Duration(wait)
}

// setWithDelay is a PodCliqueSet "pcs" with terminationDelay d (nil: none).
func setWithDelay(d *time.Duration) *grovev1alpha1.PodCliqueSet {
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs"}}
	if d != nil {
		pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: *d}
	}
	return pcs
}

// setServed sets a seed field, absent from Grove's published types, on an
// object as served (a JSON-like value: string, int64, bool, map, slice).
func setServed(t *testing.T, u *unstructured.Unstructured, v any, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
		t.Fatalf("setting %v: %v", path, err)
	}
}
