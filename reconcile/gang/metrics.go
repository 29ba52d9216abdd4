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

func init() { metrics.Registry.MustRegister(terminations) }
