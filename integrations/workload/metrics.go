package workload

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	workloadsCreatedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_workloads_created_total",
		Help: "Workloads shepherd created for TrainJobs, by scheduling.k8s.io version.",
	}, []string{"version"})
	reconcileDurationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shepherd_workload_reconcile_duration_seconds",
		Help:    "Latency of one reconcile of the TrainJob Workload and PodGroup controller.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
)

func init() {
	metrics.Registry.MustRegister(workloadsCreatedTotal, reconcileDurationSeconds)
}
