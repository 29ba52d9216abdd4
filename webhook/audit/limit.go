package audit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// Defaults of the per-namespace bound on PolicyViolation Events (`shepherd
// serve`'s --event-namespace-qps and --event-namespace-burst).
const (
	// DefaultEventNamespaceQPS is one Event a second per namespace,
	// sustained: a team's batch of wrong specs still gets its Events, and
	// a flood (forged requests, or a controller retrying a denied create)
	// fills a namespace's Events at most at this rate, while --event-qps
	// bounds all namespaces together.
	DefaultEventNamespaceQPS = 1.0
	// DefaultEventNamespaceBurst is the Events a namespace may get at once
	// above DefaultEventNamespaceQPS.
	DefaultEventNamespaceBurst = 20
)

// maxTrackedNamespaces bounds the token buckets NamespaceLimiter keeps:
// any client can name any namespace.
const maxTrackedNamespaces = 4096

// NamespaceLimiter is a token bucket per namespace ("" for cluster-scoped
// objects): Allow takes a token from the namespace's bucket. Its map is
// bounded: when it holds maxTrackedNamespaces buckets, those that are full
// (idle: a new bucket would be the same) are dropped, and if that leaves
// more than three quarters, all are — a client naming thousands of
// namespaces then gets each a fresh burst, still within --event-qps over
// all. A nil *NamespaceLimiter allows everything.
type NamespaceLimiter struct {
	limit rate.Limit
	burst int
	clock clock.PassiveClock

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// NewNamespaceLimiter returns a limiter of qps Events a second per
// namespace, burst at once; qps ≤ 0 returns nil (no bound), burst < 1 is 1.
func NewNamespaceLimiter(qps float64, burst int, clk clock.PassiveClock) *NamespaceLimiter {
	if qps <= 0 {
		return nil
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &NamespaceLimiter{limit: rate.Limit(qps), burst: max(burst, 1), clock: clk, buckets: map[string]*rate.Limiter{}}
}

// Allow takes a token from namespace's bucket: false when it is empty.
func (l *NamespaceLimiter) Allow(namespace string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	b, ok := l.buckets[namespace]
	if !ok {
		if len(l.buckets) >= maxTrackedNamespaces {
			l.prune(now)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[namespace] = b
	}
	return b.AllowN(now, 1)
}

// prune drops the full buckets, then all if more than three quarters
// remain: the next overflow is then at least a quarter of the map away.
func (l *NamespaceLimiter) prune(now time.Time) {
	for ns, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, ns)
		}
	}
	if len(l.buckets) > maxTrackedNamespaces*3/4 {
		clear(l.buckets)
	}
}

// tracked is how many buckets the limiter holds (for tests).
func (l *NamespaceLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
