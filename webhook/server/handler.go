package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// Mode says which half of the chain a handler serves.
type Mode string

const (
	// Mutating runs the defaulters and answers with a JSON patch.
	Mutating Mode = "mutating"
	// Validating runs the validation and answers with one 422 Invalid
	// status listing every Deny violation.
	Validating Mode = "validating"
)

// DefaultMaxBodyBytes bounds an AdmissionReview: the apiserver's own object
// limit is 3 MiB and an UPDATE carries two objects plus the envelope.
const DefaultMaxBodyBytes int64 = 8 << 20

// Handler answers AdmissionReviews (admission.k8s.io/v1) for one Mode.
type Handler struct {
	Mode     Mode
	Admitter webhook.Admitter
	// Policies checks WorkloadPolicies in Mode Policies, in place of
	// Admitter, at most cap(PolicySlots) at once.
	Policies    PolicyChecker
	PolicySlots chan struct{}
	// Audit records every Deny, Warn and Audit verdict; nil records none.
	Audit *audit.Recorder
	// MaxBodyBytes bounds the request body (DefaultMaxBodyBytes if zero).
	MaxBodyBytes int64
	// Limits bounds the admissions in flight and the body bytes buffered,
	// shared with the server's other handlers; nil bounds neither.
	Limits *Limits
	// Log is the base logger; each request's context carries it with the
	// request's uid, kind, namespace, name and operation.
	Log logr.Logger
	// Timeout is the time a request is answered within when the caller
	// does not say (DefaultTimeout if zero); see deadline.
	Timeout time.Duration
}

// DefaultTimeout is the apiserver's default webhook timeoutSeconds (10):
// the bound on a request that carries no timeout of its own.
const DefaultTimeout = 10 * time.Second

// deadline is how long shepherd may spend on a request: the time the
// caller waits less a margin for the answer's way back. The apiserver
// sends what is left of the webhook configuration's timeoutSeconds as the
// query parameter "timeout" (client-go's rest.Request.Timeout, used by its
// webhook dispatchers); a request without one (or with one that does not
// parse) gets def. The margin is a fifth of the timeout, at least 100 ms
// and at most 1 s: an expensive rule is then stopped and answered for by
// its own failurePolicy, naming it, before the apiserver gives up and
// applies the webhook's failurePolicy to every rule at once.
func deadline(r *http.Request, def time.Duration) deadlineCause {
	c := deadlineCause{timeout: def}
	if v := r.URL.Query().Get("timeout"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			c.timeout, c.callers = d, true
		}
	}
	c.margin = min(max(c.timeout/5, 100*time.Millisecond), time.Second)
	if c.margin >= c.timeout {
		c.margin = c.timeout / 2
	}
	return c
}

// deadlineCause is the cause of a request's context ending at its
// deadline, which a rule stopped by it reports. It is formatted only then:
// every admission has one, few are stopped.
type deadlineCause struct {
	timeout, margin time.Duration
	callers         bool
}

func (c deadlineCause) budget() time.Duration { return c.timeout - c.margin }

func (c deadlineCause) Error() string {
	what := "shepherd's default admission timeout"
	if c.callers {
		what = "the caller's timeout"
	}
	return fmt.Sprintf("%s of %s less a margin of %s", what, c.timeout, c.margin)
}

// httpError is a request rejected before admission: it never reached the
// chain, so it is answered with a plain HTTP status instead of an
// AdmissionReview.
type httpError struct {
	code   int
	reason string // metric label
	msg    string
}

// errBusy answers a request over Limits: the apiserver's client retries it
// after Retry-After, within its webhook timeout.
var errBusy = &httpError{code: http.StatusTooManyRequests, reason: "busy",
	msg: "shepherd is answering as many admission requests as it accepts at once; retry"}

// errBuffersFull answers a request whose body would take the bytes
// buffered past Limits, as errBusy does.
var errBuffersFull = &httpError{code: http.StatusTooManyRequests, reason: "buffers_full",
	msg: "shepherd is holding as many request bytes as it accepts at once; retry"}

// errClientBuffersFull answers a request whose body would take the bytes
// buffered for its source address past its share of Limits (half), as
// errBuffersFull does: one client's bodies cannot starve the others'.
var errClientBuffersFull = &httpError{code: http.StatusTooManyRequests, reason: "client_buffers_full",
	msg: "this client holds as many request bytes as one client may (half of --webhook-max-buffered-bytes); retry once its other requests are answered"}

func (e *httpError) Error() string { return e.msg }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var rv *Review
	defer func() {
		// A bug in a rule or defaulter must not take the server down nor
		// hand the apiserver a broken connection: answer with a denial
		// (the webhooks fail closed anyway) and leave the stack in the log.
		if p := recover(); p != nil {
			admissionPanics.WithLabelValues(string(h.Mode)).Inc()
			h.Log.Error(fmt.Errorf("panic: %v", p), "recovered from a panic while admitting", "webhook", h.Mode, "stack", string(debug.Stack()))
			if rv == nil {
				http.Error(w, "shepherd: internal error while reading the AdmissionReview (see shepherd's log)", http.StatusInternalServerError)
				return
			}
			resp := &admissionv1.AdmissionResponse{
				UID:     rv.Request.UID,
				Allowed: false,
				Result: &metav1.Status{
					Status:  metav1.StatusFailure,
					Code:    http.StatusInternalServerError,
					Reason:  metav1.StatusReasonInternalError,
					Message: "shepherd failed internally while admitting this request (see shepherd's log); it is denied",
				},
			}
			h.observe(rv.Request, verdictError, start)
			writeReview(w, resp)
		}
	}()

	// Full already: refuse before reading a byte of the body.
	if h.Limits.full() {
		h.fail(w, errBusy)
		return
	}
	res := reservation{limits: h.Limits, client: remoteAddr(r)}
	defer res.release() // after the answer: the chain's decoded objects are the body's size again
	rv, err := h.readReview(w, r, &res)
	if err != nil {
		h.fail(w, err)
		return
	}
	if !h.Limits.acquire() {
		h.fail(w, errBusy)
		return
	}
	defer h.Limits.release()
	if h.Mode == Policies {
		// Compiling a policy takes a core for milliseconds: a burst of
		// applies (10,000 at once in test/faults) would take every core
		// from the workloads' admissions and /readyz, and a replica that
		// does not answer its probe in time leaves the Service. Checks
		// wait for one of PolicySlots; one that waits past its budget
		// is answered busy, which the apiserver retries.
		if h.PolicySlots != nil {
			cause := deadline(r, cmp.Or(h.Timeout, DefaultTimeout))
			select {
			case h.PolicySlots <- struct{}{}:
				defer func() { <-h.PolicySlots }()
			case <-time.After(cause.budget()):
				h.fail(w, errBusy)
				return
			}
		}
		resp, verdict := policyResponse(h.Policies, rv.Request, rv)
		h.observe(rv.Request, verdict, start)
		writeReview(w, resp)
		return
	}
	req := RequestFrom(rv)
	req.CallerAuthenticated = CallerAuthenticated(r)
	log := withRequestValues(h.Log, audit.RequestLogValues(req, "webhook", h.Mode)...)
	cause := deadline(r, cmp.Or(h.Timeout, DefaultTimeout))
	ctx, cancel := context.WithTimeoutCause(logf.IntoContext(r.Context(), log), cause.budget(), cause)
	defer cancel()

	verdict := h.admit(ctx, req)
	if h.Audit != nil {
		h.Audit.Record(ctx, req, verdict)
	}
	resp := Response(h.Mode, req, verdict)
	h.observe(rv.Request, verdictLabel(verdict), start)
	writeReview(w, resp)
}

// fail answers a request rejected before admission with its HTTP status.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{code: http.StatusBadRequest, reason: "malformed", msg: err.Error()}
	}
	badRequests.WithLabelValues(string(h.Mode), he.reason).Inc()
	if he.code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	http.Error(w, he.msg, he.code)
}

// admit runs the mode's half of the chain, timed for
// shepherd_rule_evaluation_duration_seconds.
func (h *Handler) admit(ctx context.Context, req *webhook.Request) *webhook.Verdict {
	start := time.Now()
	var v *webhook.Verdict
	phase := "validate"
	if h.Mode == Mutating {
		phase = "default"
		v = h.Admitter.Default(ctx, req)
	} else {
		v = h.Admitter.Validate(ctx, req)
	}
	ruleEvaluation.WithLabelValues(phase, audit.KindLabel(req.Kind.Kind)).Observe(time.Since(start).Seconds())
	if v == nil {
		// The contract is a verdict for every request; treat a missing
		// one as the internal error it is.
		panic(fmt.Sprintf("admission chain returned no verdict for %s %s", req.Operation, req.Kind.Kind))
	}
	return v
}

func (h *Handler) observe(r *admissionv1.AdmissionRequest, verdict string, start time.Time) {
	// Both come from the request body: a closed set of label values, or
	// any client could grow /metrics without bound.
	kind, op := audit.KindLabel(r.Kind.Kind), operationLabel(r.Operation)
	admissionRequests.WithLabelValues(string(h.Mode), kind, op, verdict).Inc()
	admissionDuration.WithLabelValues(string(h.Mode), kind, op, verdict).Observe(time.Since(start).Seconds())
}

// readReview reads and checks the request: POST, JSON, bounded, and a
// well-formed admission.k8s.io/v1 AdmissionReview carrying a request. The
// body's bytes are reserved from res as they arrive.
func (h *Handler) readReview(w http.ResponseWriter, r *http.Request, res *reservation) (*Review, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, &httpError{code: http.StatusMethodNotAllowed, reason: "method",
			msg: fmt.Sprintf("shepherd admission webhooks accept POST, not %s", r.Method)}
	}
	// The apiserver sends exactly "application/json"; anything else is
	// parsed, for parameters such as a charset.
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &httpError{code: http.StatusUnsupportedMediaType, reason: "content_type",
				msg: fmt.Sprintf("Content-Type %q is not supported: send an AdmissionReview as application/json", ct)}
		}
	}
	max := h.MaxBodyBytes
	if max <= 0 {
		max = DefaultMaxBodyBytes
	}
	if r.ContentLength > max {
		return nil, tooLarge(max)
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, max), r.ContentLength, max, res)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge(max)
		case errors.Is(err, errBuffersFull):
			return nil, errBuffersFull
		case errors.Is(err, errClientBuffersFull):
			return nil, errClientBuffersFull
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The server's read timeout: the client stalled mid-body.
			return nil, &httpError{code: http.StatusRequestTimeout, reason: "timeout",
				msg: "the AdmissionReview did not arrive within the webhook server's read timeout"}
		}
		return nil, &httpError{code: http.StatusBadRequest, reason: "malformed", msg: fmt.Sprintf("reading the request body: %v", err)}
	}
	return DecodeReview(body)
}

func tooLarge(max int64) *httpError {
	return &httpError{code: http.StatusRequestEntityTooLarge, reason: "too_large",
		msg: fmt.Sprintf("AdmissionReview is larger than the %d bytes shepherd accepts", max)}
}

// bodyChunk is the first allocation for a body: a typical AdmissionReview
// (tens of KiB) fits in one or two.
const bodyChunk = 32 << 10

// readBody reads the whole body, growing its buffer as bytes arrive — at
// most doubling what has arrived, never to the Content-Length a client
// declares before sending it — and reserving every byte it grows by from
// res (errClientBuffersFull or errBuffersFull when the client's share or
// the server's budget is spent). declared (-1:
// unknown) caps the growth, as net/http never hands a handler more;
// maxBytes caps it otherwise, plus the one byte that tells a body of
// maxBytes from a larger one, which body (a MaxBytesReader) refuses.
func readBody(body io.Reader, declared, maxBytes int64, res *reservation) ([]byte, error) {
	limit := maxBytes + 1
	if declared >= 0 {
		limit = min(declared, limit)
	}
	var b []byte
	for {
		if len(b) == cap(b) {
			if int64(len(b)) >= limit {
				if declared >= 0 {
					// All of the declared length: net/http returns no more.
					break
				}
				// Unreachable: body refuses byte maxBytes+1 before it fits.
				return nil, &http.MaxBytesError{Limit: maxBytes}
			}
			n := min(max(2*int64(cap(b)), bodyChunk), limit)
			if err := res.grow(n); err != nil {
				return nil, err
			}
			grown := make([]byte, len(b), n)
			copy(grown, b)
			b = grown
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if declared >= 0 && int64(len(b)) < declared {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// remoteAddr is the request's source IP address, the key of its client's
// share of Limits; invalid when net/http's RemoteAddr does not parse (no
// share applies then).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func verdictLabel(v *webhook.Verdict) string {
	switch {
	case !v.Allowed:
		return verdictDenied
	case len(v.Warnings) > 0:
		return verdictWarned
	default:
		return verdictAllowed
	}
}
