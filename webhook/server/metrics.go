package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric label values for the verdict of one admission request.
const (
	verdictAllowed = "allowed"
	verdictWarned  = "warned"
	verdictDenied  = "denied"
	verdictError   = "error"
)

var (
	admissionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_admission_requests_total",
		Help: "Admission requests answered, by webhook (mutating|validating), kind, operation and verdict (allowed|warned|denied|error).",
	}, []string{"webhook", "kind", "operation", "verdict"})

	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shepherd_admission_duration_seconds",
		Help: "Time to answer one admission request, from decoding the AdmissionReview to encoding the response, by webhook, kind, operation and verdict.",
		// Admission is in the apiserver's request path: the interesting
		// range is tens of microseconds to the 5 s webhook timeout.
		Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 500e-3, 1, 5},
	}, []string{"webhook", "kind", "operation", "verdict"})

	ruleEvaluation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shepherd_rule_evaluation_duration_seconds",
		Help:    "Time the admission chain spends evaluating its rules for one request: phase default (the D-* defaulters) or validate (CEL rules, WorkloadPolicies and lookups), by kind.",
		Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 250e-3, 1},
	}, []string{"phase", "kind"})

	admissionPanics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_admission_panics_total",
		Help: "Panics recovered while answering an admission request (each is logged with its stack and answered with a 500 denial).",
	}, []string{"webhook"})

	badRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_admission_bad_requests_total",
		Help: "HTTP requests to the webhooks rejected before admission, by reason (method, content_type, too_large, malformed).",
	}, []string{"webhook", "reason"})
)

func init() {
	metrics.Registry.MustRegister(admissionRequests, admissionDuration, ruleEvaluation, admissionPanics, badRequests)
}
