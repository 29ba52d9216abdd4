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
	// DeadlineUpstream: the deadline passed, or the job already failed by
	// it, and the upstream operator (Trainer v2.2+) enforces deadlines:
	// shepherd writes no condition, emits no Event and deletes no JobSet,
	// so nothing is done twice (docs/concepts.md, "Who enforces what").
	DeadlineUpstream
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
	case DeadlineUpstream:
		return "Upstream"
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
// enforces says whether shepherd enforces deadlines itself
// (integrations.Enforcement, FeatureDeadline); when it does not, every
// action on the job becomes DeadlineUpstream. A deadline still ahead is
// waited for either way: the requeue costs one read, and should the
// decision move to shepherd meanwhile (Trainer's CRD downgraded, the
// setting changed) the deadline is enforced on time, recomputed from the
// object like everything else.
func DecideDeadline(tj *trainerv1alpha1.TrainJob, clk clock.PassiveClock, enforces bool) DeadlineDecision {
	d := decideDeadline(tj, clk)
	if !enforces && (d.Action == DeadlineExceed || d.Action == DeadlineCleanup) {
		return DeadlineDecision{Action: DeadlineUpstream, Deadline: d.Deadline}
	}
	return d
}

func decideDeadline(tj *trainerv1alpha1.TrainJob, clk clock.PassiveClock) DeadlineDecision {
	if failedByDeadline(tj) {
		return DeadlineDecision{Action: DeadlineCleanup}
	}
	ads := tj.Spec.ActiveDeadlineSeconds
	if ads == nil || Finished(tj) || Suspended(tj) {
		return DeadlineDecision{Action: DeadlineNone}
	}
	deadline := StartTime(tj).Add(seconds(*ads))
	now := clk.Now()
	// Exceeded means past the deadline; at exactly the deadline the time
	// left is zero, which requeueAfter turns into 1 s.
	if now.After(deadline) {
		return DeadlineDecision{Action: DeadlineExceed, Deadline: deadline}
	}
	return DeadlineDecision{Action: DeadlineWait, Deadline: deadline, RequeueAfter: requeueAfter(deadline, now)}
}

// maxDeadlineSeconds caps activeDeadlineSeconds (the CRD sets no maximum) so
// that converting it to a time.Duration cannot overflow into a negative,
// already-passed deadline: a century is "never" for a training run.
const maxDeadlineSeconds = 100 * 365 * 24 * 60 * 60

func seconds(s int64) time.Duration {
	return time.Duration(min(s, maxDeadlineSeconds)) * time.Second
}

// failedByDeadline reports whether the job is Failed=True with reason
// DeadlineExceeded — shepherd's own mark, or Trainer's.
func failedByDeadline(tj *trainerv1alpha1.TrainJob) bool {
	c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
	return c != nil && c.Status == "True" && c.Reason == api.ReasonDeadlineExceeded
}
