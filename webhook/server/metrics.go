package server

import (
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/webhook/audit"
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
		Help: "HTTP requests to the webhooks rejected before admission, by reason (method, content_type, too_large, malformed, timeout: the body did not arrive within the read timeout, busy: --webhook-max-in-flight reached, buffers_full: --webhook-max-buffered-bytes reached, client_buffers_full: the client's share of it, half, reached).",
	}, []string{"webhook", "reason"})

	inFlightRequests = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shepherd_admission_in_flight_requests",
		Help: "Admission requests being admitted now (their bodies read), against --webhook-max-in-flight.",
	})

	bufferedBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shepherd_admission_buffered_bytes",
		Help: "Request body bytes the webhooks hold now, against --webhook-max-buffered-bytes.",
	})

	openConnections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shepherd_webhook_open_connections",
		Help: "Connections open to the webhook server, against --webhook-max-connections.",
	})

	rejectedConnections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_webhook_rejected_connections_total",
		Help: "Connections to the webhook server closed as soon as accepted, by reason: max_connections (--webhook-max-connections were open) or max_connections_per_client (--webhook-max-connections-per-client were open from the connection's source address).",
	}, []string{"reason"})

	unauthenticatedRequests = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shepherd_webhook_unauthenticated_requests_total",
		Help: "Requests to the webhook server answered 401 because --webhook-client-ca is set and they presented no client certificate.",
	})
)

// Reasons of shepherd_webhook_rejected_connections_total.
const (
	rejectedMaxConnections          = "max_connections"
	rejectedMaxConnectionsPerClient = "max_connections_per_client"
)

func init() {
	metrics.Registry.MustRegister(admissionRequests, admissionDuration, ruleEvaluation, admissionPanics, badRequests,
		inFlightRequests, bufferedBytes, openConnections, rejectedConnections, unauthenticatedRequests)
	// Both reasons are exported from the start, at zero, so a rate over
	// them has a series before the first refusal.
	rejectedConnections.WithLabelValues(rejectedMaxConnections)
	rejectedConnections.WithLabelValues(rejectedMaxConnectionsPerClient)
}

// operationLabel is the operation label of a request: one of the four
// admission operations, or audit.OtherLabel for whatever else a client
// sends.
func operationLabel(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return string(op)
	}
	return audit.OtherLabel
}
