package training

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shepherd_training_restarts_total",
		Help: "Replica restarts of Training PodCliqueSets committed by shepherd.",
	})
	failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_training_failures_total",
		Help: "Training PodCliqueSets shepherd marked Failed, by reason (MaxRestartsExceeded, MaxRuntimeExceeded).",
	}, []string{"reason"})
)

func init() { metrics.Registry.MustRegister(restarts, failures) }
