package integrations

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// frameworkActive is 1 for a framework whose reconcilers and lookups run,
// else 0.
var frameworkActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "shepherd_framework_active",
	Help: "1 if the framework's CRDs are established and shepherd runs its reconcilers and lookups, else 0.",
}, []string{"framework"})

func init() {
	metrics.Registry.MustRegister(frameworkActive)
}

func setActiveMetric(name string, active bool) {
	v := 0.0
	if active {
		v = 1
	}
	frameworkActive.WithLabelValues(name).Set(v)
}
