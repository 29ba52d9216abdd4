package trainjob

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// DeadlineAction is what the deadline rule asks for.
type DeadlineAction int

const (
	// DeadlineNone: no deadline applies (unset, finished or suspended).
	DeadlineNone DeadlineAction = iota
	// DeadlineWait: the deadline lies ahead; look again at RequeueAfter.
	DeadlineWait
	// DeadlineExceed: the deadline passed; mark the job Failed with reason
	// DeadlineExceeded and delete its JobSet.
	DeadlineExceed
	// DeadlineCleanup: the job already failed its deadline; make sure its
	// JobSet is gone (the delete after the status write may have failed).
	DeadlineCleanup
)

func (a DeadlineAction) String() string {
	switch a {
	case DeadlineNone:
		return "None"
	case DeadlineWait:
		return "Wait"
	case DeadlineExceed:
		return "Exceed"
	case DeadlineCleanup:
		return "Cleanup"
	}
	return "Unknown"
}

// DeadlineDecision is the outcome of DecideDeadline.
type DeadlineDecision struct {
	Action DeadlineAction
	// Deadline is start + activeDeadlineSeconds (Wait and Exceed only).
	Deadline time.Time
	// RequeueAfter is the time left until Deadline (Wait only); never
	// non-positive.
	RequeueAfter time.Duration
}

// DecideDeadline applies spec.activeDeadlineSeconds (R-TJ) at clk's now.
func DecideDeadline(tj *trainerv1alpha1.TrainJob, clk clock.PassiveClock) DeadlineDecision {
	if failedByDeadline(tj) {
		return DeadlineDecision{Action: DeadlineCleanup}
	}
	ads := tj.Spec.ActiveDeadlineSeconds
	if ads == nil || Finished(tj) || Suspended(tj) {
		return DeadlineDecision{Action: DeadlineNone}
	}
	deadline := StartTime(tj).Add(time.Duration(*ads) * time.Second)
	now := clk.Now()
	// Exceeded means past the deadline; at exactly the deadline the time
	// left is zero, which requeueAfter turns into 1 s.
	if now.After(deadline) {
		return DeadlineDecision{Action: DeadlineExceed, Deadline: deadline}
	}
	return DeadlineDecision{Action: DeadlineWait, Deadline: deadline, RequeueAfter: requeueAfter(deadline, now)}
}

// failedByDeadline reports whether the job is Failed=True with reason
// DeadlineExceeded — shepherd's own mark, or Trainer's.
func failedByDeadline(tj *trainerv1alpha1.TrainJob) bool {
	c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
	return c != nil && c.Status == "True" && c.Reason == api.ReasonDeadlineExceeded
}
