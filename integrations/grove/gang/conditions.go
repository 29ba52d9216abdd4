package gang

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetCondition returns conds with c set, keeping the lastTransitionTime of an
// existing condition of the same type and status and stamping now otherwise:
// delays are measured from that timestamp, so it must move only on a real
// transition and must come from the injected clock, never time.Now.
func SetCondition(conds []metav1.Condition, c metav1.Condition, now time.Time) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(conds)+1)
	out = append(out, conds...)
	if old := meta.FindStatusCondition(out, c.Type); old != nil && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	}
	for i := range out {
		if out[i].Type == c.Type {
			out[i] = c
			return out
		}
	}
	return append(out, c)
}

// remaining is how long is left of delay started at since, at now. Zero or
// less means it has expired: exactly at the delay counts as expired, as in
// Grove's waitFor <= 0.
func remaining(since time.Time, delay time.Duration, now time.Time) time.Duration {
	return since.Add(delay).Sub(now)
}

// MinRequeue is the minimum-wait accumulator every decision uses: the
// shortest positive wait wins; zero means no requeue.
type MinRequeue time.Duration

// Add offers a wait. A non-positive wait (clock skew, or an expiry already
// acted on) becomes one second: a zero wait would mean no requeue.
func (m *MinRequeue) Add(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if *m == 0 || MinRequeue(d) < *m {
		*m = MinRequeue(d)
	}
}
