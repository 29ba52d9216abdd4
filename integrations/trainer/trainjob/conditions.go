package trainjob

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// minRequeue is the requeue used when the time left is not positive: the
// clock of whoever wrote a timestamp may run ahead of ours.
const minRequeue = time.Second

// requeueAfter turns the time left until at into a RequeueAfter, never
// non-positive.
func requeueAfter(at, now time.Time) time.Duration {
	if left := at.Sub(now); left > 0 {
		return left
	}
	return minRequeue
}

// isTrue reports whether the TrainJob has condition t with status True.
func isTrue(tj *trainerv1alpha1.TrainJob, t string) bool {
	return meta.IsStatusConditionTrue(tj.Status.Conditions, t)
}

// Finished reports whether the TrainJob reached a terminal state: Complete
// or Failed is True.
func Finished(tj *trainerv1alpha1.TrainJob) bool {
	return isTrue(tj, api.TrainJobComplete) || isTrue(tj, api.TrainJobFailed)
}

// FinishTime is when the TrainJob finished: the lastTransitionTime of its
// Complete=True or Failed=True condition, the earlier one should both be
// True. ok is false for a job that has not finished.
func FinishTime(tj *trainerv1alpha1.TrainJob) (t time.Time, ok bool) {
	for _, ct := range []string{api.TrainJobComplete, api.TrainJobFailed} {
		c := meta.FindStatusCondition(tj.Status.Conditions, ct)
		if c == nil || c.Status != metav1.ConditionTrue {
			continue
		}
		if !ok || c.LastTransitionTime.Time.Before(t) {
			t, ok = c.LastTransitionTime.Time, true
		}
	}
	return t, ok
}

// Suspended reports whether the TrainJob is suspended: asked to be
// (spec.suspend) or still reported so by Trainer (Suspended=True, which
// Trainer flips to False/Resumed once it has resumed the JobSet).
func Suspended(tj *trainerv1alpha1.TrainJob) bool {
	if tj.Spec.Suspend != nil && *tj.Spec.Suspend {
		return true
	}
	return isTrue(tj, api.TrainJobSuspended)
}

// StartTime is when the TrainJob's active deadline window began: the
// lastTransitionTime of Suspended=False with reason Resumed when present —
// each resume restarts the full window, and a job created suspended starts
// at its first resume — else its creationTimestamp: Trainer v2.3.0's own
// rule (see the package doc). A job created suspended whose resume Trainer
// never reported (no Suspended condition at all) is indistinguishable from
// one never suspended and counts from creation, in Trainer as here.
func StartTime(tj *trainerv1alpha1.TrainJob) time.Time {
	c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobSuspended)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason == api.ReasonResumed {
		return c.LastTransitionTime.Time
	}
	return tj.CreationTimestamp.Time
}
