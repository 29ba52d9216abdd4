package trainjob

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	deadlineExceededTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shepherd_trainjob_deadline_exceeded_total",
		Help: "TrainJobs shepherd marked Failed with reason DeadlineExceeded.",
	})
	ttlDeletionsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shepherd_trainjob_ttl_deletions_total",
		Help: "Finished TrainJobs shepherd deleted because their runtime's ttlSecondsAfterFinished expired.",
	})
	deadlineLagSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shepherd_trainjob_deadline_lag_seconds",
		Help:    "Time from a TrainJob's active deadline to shepherd marking it Failed.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
	})
	reconcileDurationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shepherd_trainjob_reconcile_duration_seconds",
		Help:    "Latency of one reconcile of the TrainJob deadline and TTL controller.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
)

func init() {
	metrics.Registry.MustRegister(deadlineExceededTotal, ttlDeletionsTotal, deadlineLagSeconds, reconcileDurationSeconds)
}
