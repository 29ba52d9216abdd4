package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

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
	// Audit records every Deny, Warn and Audit verdict; nil records none.
	Audit *audit.Recorder
	// MaxBodyBytes bounds the request body (DefaultMaxBodyBytes if zero).
	MaxBodyBytes int64
	// Log is the base logger; each request's context carries it with the
	// request's uid, kind, namespace, name and operation.
	Log logr.Logger

	logOnce sync.Once
	logSink logr.LogSink // lazyBase(Log)
}

// httpError is a request rejected before admission: it never reached the
// chain, so it is answered with a plain HTTP status instead of an
// AdmissionReview.
type httpError struct {
	code   int
	reason string // metric label
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var rv *decodedReview
	// Deferred first, so it runs last: after the answer is written.
	x := getExchange()
	defer func() {
		if x != nil {
			putExchange(x)
		}
	}()
	defer func() {
		// A bug in a rule or defaulter must not take the server down nor
		// hand the apiserver a broken connection: answer with a denial
		// (the webhooks fail closed anyway) and leave the stack in the log.
		if p := recover(); p != nil {
			// What the panic left half-built is not worth reusing.
			x = nil
			admissionPanics.WithLabelValues(string(h.Mode)).Inc()
			h.Log.Error(fmt.Errorf("panic: %v", p), "recovered from a panic while admitting", "webhook", h.Mode, "stack", string(debug.Stack()))
			if rv == nil || rv.Request == nil {
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

	rv, err := h.readReview(w, r, x)
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			he = &httpError{code: http.StatusBadRequest, reason: "malformed", msg: err.Error()}
		}
		badRequests.WithLabelValues(string(h.Mode), he.reason).Inc()
		http.Error(w, he.msg, he.code)
		return
	}
	req := x.requestFrom()
	h.logOnce.Do(func() { h.logSink = lazyBase(h.Log) })
	log := withRequestValues(h.Log, h.logSink, requestID{webhook: h.Mode, uid: string(req.UID), kind: req.Kind.Kind,
		namespace: req.Namespace, name: req.Name, operation: string(req.Operation)}, &x.log)
	ctx := ctrl.LoggerInto(r.Context(), log)

	verdict := h.admit(ctx, req)
	if h.Audit != nil {
		h.Audit.Record(ctx, req, verdict)
	}
	patch := getBuffer(0)
	defer putBuffer(patch)
	resp := response(h.Mode, req, verdict, *patch)
	if resp.Patch != nil {
		*patch = resp.Patch[:0] // keep what the patch grew the buffer to
	}
	h.observe(rv.Request, verdictLabel(verdict), start)
	writeReview(w, resp)
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
	ruleEvaluation.WithLabelValues(phase, req.Kind.Kind).Observe(time.Since(start).Seconds())
	if v == nil {
		// The contract is a verdict for every request; treat a missing
		// one as the internal error it is.
		panic(fmt.Sprintf("admission chain returned no verdict for %s %s", req.Operation, req.Kind.Kind))
	}
	return v
}

func (h *Handler) observe(r *admissionv1.AdmissionRequest, verdict string, start time.Time) {
	kind, op := r.Kind.Kind, string(r.Operation)
	admissionRequests.WithLabelValues(string(h.Mode), kind, op, verdict).Inc()
	admissionDuration.WithLabelValues(string(h.Mode), kind, op, verdict).Observe(time.Since(start).Seconds())
}

// readReview reads and checks the request: POST, JSON, bounded, and a
// well-formed admission.k8s.io/v1 AdmissionReview carrying a request.
func (h *Handler) readReview(w http.ResponseWriter, r *http.Request, x *exchange) (*decodedReview, error) {
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
	buf := getBuffer(0)
	defer putBuffer(buf)
	body, err := readBody(http.MaxBytesReader(w, r.Body, max), r.ContentLength, max, buf)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &httpError{code: http.StatusRequestEntityTooLarge, reason: "too_large",
				msg: fmt.Sprintf("AdmissionReview is larger than the %d bytes shepherd accepts", max)}
		}
		return nil, &httpError{code: http.StatusBadRequest, reason: "malformed", msg: fmt.Sprintf("reading the request body: %v", err)}
	}
	return decodeReview(body, x)
}

// readBody reads the whole body into buf, sized by Content-Length when the
// client sent it (the apiserver does) instead of growing it; net/http never
// hands a handler more than Content-Length bytes.
func readBody(body io.Reader, contentLength, max int64, buf *[]byte) ([]byte, error) {
	if contentLength <= 0 || contentLength > max {
		return io.ReadAll(body)
	}
	if int64(cap(*buf)) < contentLength {
		*buf = make([]byte, 0, contentLength)
	}
	b := (*buf)[:contentLength]
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// RequestFrom turns an AdmissionRequest into the chain's Request; the
// objects stay raw JSON so the chain patches exactly what was sent.
func RequestFrom(r *admissionv1.AdmissionRequest) *webhook.Request {
	req := requestOf(r)
	return &req
}

func requestOf(r *admissionv1.AdmissionRequest) webhook.Request {
	return webhook.Request{
		UID:       r.UID,
		Operation: r.Operation,
		Kind:      r.Kind,
		Resource:  r.Resource,
		Namespace: r.Namespace,
		Name:      r.Name,
		Object:    r.Object.Raw,
		OldObject: r.OldObject.Raw,
		DryRun:    r.DryRun != nil && *r.DryRun,
		UserInfo:  r.UserInfo,
	}
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

func writeReview(w http.ResponseWriter, resp *admissionv1.AdmissionResponse) {
	buf := getBuffer(256 + base64.StdEncoding.EncodedLen(len(resp.Patch)))
	defer putBuffer(buf)
	out, err := encodeReview(*buf, resp)
	if err != nil {
		// Every field is a plain string, number or []byte: this cannot
		// fail short of a bug, which the recover above turns into a 500.
		panic(fmt.Sprintf("encoding AdmissionReview: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	// A write error is the apiserver having gone away; nobody is left to tell.
	_, _ = w.Write(out)
}
