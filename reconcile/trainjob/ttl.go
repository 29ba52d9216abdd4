package trainjob

import (
	"time"

	"k8s.io/utils/clock"

	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// TTLDecision is the outcome of DecideTTL.
type TTLDecision struct {
	// Delete: finish + TTL is not after now; delete the TrainJob.
	Delete bool
	// ExpiresAt is finish + TTL, when a TTL applies to a finished job.
	ExpiresAt time.Time
	// RequeueAfter is the time left until ExpiresAt when not yet expired;
	// zero when nothing is pending (unfinished job or no TTL).
	RequeueAfter time.Duration
}

// DecideTTL applies the runtime's ttlSecondsAfterFinished (R-TJ) to a
// TrainJob at clk's now. ttl is nil when the runtime sets none (or cannot be
// found). Suspension plays no part: only the finish time counts.
func DecideTTL(tj *trainerv1alpha1.TrainJob, ttl *int32, clk clock.PassiveClock) TTLDecision {
	if ttl == nil {
		return TTLDecision{}
	}
	finished, ok := FinishTime(tj)
	if !ok {
		return TTLDecision{}
	}
	expires := finished.Add(time.Duration(*ttl) * time.Second)
	now := clk.Now()
	if !now.Before(expires) {
		return TTLDecision{Delete: true, ExpiresAt: expires}
	}
	return TTLDecision{ExpiresAt: expires, RequeueAfter: requeueAfter(expires, now)}
}
