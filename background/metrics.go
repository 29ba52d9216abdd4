package background

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	violationsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shepherd_audit_violations",
		Help: "Stored objects that fail a rule now, as the background audit's last pass found them (leader replica only), by rule and kind; a series whose violations were all cleared is removed.",
	}, []string{"rule", "kind"})
	auditedObjects = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shepherd_audit_objects",
		Help: "Stored objects the background audit's last pass covered (leader replica only).",
	})
	evaluations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_audit_evaluations_total",
		Help: "Stored objects the background audit judged through the admission chain (result=evaluated) or whose verdict it kept because neither the object nor the rule set changed (result=reused).",
	}, []string{"result"})
	passDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shepherd_audit_pass_duration_seconds",
		Help:    "Duration of one background audit pass over the stored objects.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
)

func init() {
	metrics.Registry.MustRegister(violationsGauge, auditedObjects, evaluations, passDuration)
}
