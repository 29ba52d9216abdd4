package gang

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Levels of shepherd_gang_terminations_total.
const (
	LevelPCSG = "pcsg"
	LevelPCS  = "pcs"
)

// terminations counts gang terminations: one per PCSG replica or PodCliqueSet
// replica terminated.
var terminations = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "shepherd_gang_terminations_total",
	Help: "Gang terminations, by level: pcsg (one PodCliqueScalingGroup replica) or pcs (one PodCliqueSet replica).",
}, []string{"level"})

// terminationLag is how late a termination's deletions completed after its
// delay expired, as shepherd sees it: requeue precision, queueing behind
// other terminations, and the delete calls themselves.
var terminationLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "shepherd_gang_termination_lag_seconds",
	Help:    "Time from a breach's terminationDelay expiry to the completion of the gang termination's deletions, by level.",
	Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
}, []string{"level"})

func init() { metrics.Registry.MustRegister(terminations, terminationLag) }
