// Package auditsink receives the kube-apiserver's audit events and records
// the verdicts of shepherd's exported ValidatingAdmissionPolicies in the
// audit trail, as the webhook records its own.
//
// In the native admission mode (`shepherd serve --admission-mode=native`)
// the apiserver evaluates shepherd's rules itself, as the policies `shepherd
// export vap` writes, and shepherd never sees those requests. The apiserver
// tells of a failed validation only in its audit events: a binding whose
// validationActions include Audit adds the annotation
// validation.policy.admission.k8s.io/validation_failure to the request's
// audit event — a JSON list of {message, policy, binding, expressionIndex,
// validationActions}. Its audit webhook backend (--audit-webhook-config-file)
// posts the events as audit.k8s.io/v1 EventLists to this handler, which
// turns every failure of a shepherd policy into an audit.Record — the rule
// ID the policy was exported from, the action, the message, the user and
// the object — and writes it through the audit.Recorder like a webhook
// verdict: log line, shepherd_policy_verdicts_total, PolicyViolation Event
// and the /audit ring.
package auditsink

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// Path is where the sink is served, on the webhook server (HTTPS, the
// apiserver already reaches it through the shepherd-webhook Service).
const Path = "/audit-sink"

// AnnotationValidationFailure is the audit annotation the apiserver adds
// for the failed validations of bindings with the Audit action.
const AnnotationValidationFailure = "validation.policy.admission.k8s.io/validation_failure"

// DefaultMaxBodyBytes bounds one EventList. The apiserver's batching
// backend sends at most 400 events a batch (--audit-webhook-batch-max-size)
// and at level Metadata an event is a few kB: 8 MiB leaves room for ten
// times that, and is the webhook's own bound for an AdmissionReview.
const DefaultMaxBodyBytes int64 = 8 << 20

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	if err := auditv1.AddToScheme(scheme); err != nil {
		panic(err) // a generated scheme; cannot fail
	}
	metrics.Registry.MustRegister(sinkRequests)
}

var sinkRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "shepherd_audit_sink_requests_total",
	Help: "Requests to the audit sink (" + Path + "), by result: accepted, unauthorized, method, too_large, malformed.",
}, []string{"result"})

// RuleResolver maps the name of an exported ValidatingAdmissionPolicy back
// to the shepherd rule it carries (V-TJ-1 for shepherd-v-tj-1, the
// WorkloadPolicy's name for shepherd-policy-<name>); false for a policy
// that is not shepherd's.
type RuleResolver func(policy string) (string, bool)

// Handler accepts the apiserver's audit events (POST, an audit.k8s.io/v1
// EventList) and records the failed validations of shepherd's policies.
type Handler struct {
	// Recorder writes the records, as for the webhooks' verdicts.
	Recorder *audit.Recorder
	// Rules resolves policy names to rule IDs.
	Rules RuleResolver
	// Token returns the bearer token the caller must present: the `token`
	// of the user in the apiserver's audit webhook kubeconfig. It is asked
	// on every request (the token may be rotated). Nil or empty refuses
	// every request: an unauthenticated sink would let anyone who reaches
	// the webhook port write the audit trail and Events.
	Token func() string
	// MaxBodyBytes bounds the body (DefaultMaxBodyBytes if zero).
	MaxBodyBytes int64
	// Log is the base logger.
	Log logr.Logger
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, result, format string, args ...any) {
		sinkRequests.WithLabelValues(result).Inc()
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shepherd audit sink"`)
		}
		http.Error(w, fmt.Sprintf(format, args...), code)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "method", "the audit sink accepts POST of an audit.k8s.io/v1 EventList, not %s", r.Method)
		return
	}
	if !h.authorized(r) {
		fail(http.StatusUnauthorized, "unauthorized", "the audit sink needs the bearer token of --audit-sink-token-file: set it as the user's token in the apiserver's --audit-webhook-config-file")
		return
	}
	max := h.MaxBodyBytes
	if max <= 0 {
		max = DefaultMaxBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			fail(http.StatusRequestEntityTooLarge, "too_large", "the EventList is larger than %d bytes: lower the apiserver's --audit-webhook-batch-max-size", max)
			return
		}
		fail(http.StatusBadRequest, "malformed", "reading the EventList: %v", err)
		return
	}
	list, err := decode(body)
	if err != nil {
		fail(http.StatusBadRequest, "malformed", "%v", err)
		return
	}
	ctx := logf.IntoContext(r.Context(), h.Log)
	n := 0
	for i := range list.Items {
		n += len(h.record(ctx, &list.Items[i]))
	}
	sinkRequests.WithLabelValues("accepted").Inc()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"events": len(list.Items), "records": n})
}

// authorized compares the bearer token in constant time.
func (h *Handler) authorized(r *http.Request) bool {
	if h.Token == nil {
		return false
	}
	want := h.Token()
	if want == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) == 1
}

// decode reads an audit.k8s.io/v1 EventList with apimachinery's
// deserializer (JSON, as the audit webhook backend sends it), refusing any
// other kind with what was sent instead.
func decode(body []byte) (*auditv1.EventList, error) {
	obj, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		if gvk != nil && !gvk.Empty() {
			return nil, fmt.Errorf("want an audit.k8s.io/v1 EventList, got %s: %w", gvk, err)
		}
		return nil, fmt.Errorf("want an audit.k8s.io/v1 EventList (apiVersion audit.k8s.io/v1, kind EventList): %w", err)
	}
	list, ok := obj.(*auditv1.EventList)
	if !ok {
		return nil, fmt.Errorf("want an audit.k8s.io/v1 EventList, got %s", gvk)
	}
	return list, nil
}

// record turns the validation failures of shepherd's policies in one
// event into audit records. Only the ResponseComplete stage counts: the
// annotation is on every later stage of the same request, so taking one
// keeps each verdict recorded once whatever stages the audit policy lets
// through.
func (h *Handler) record(ctx context.Context, ev *auditv1.Event) []audit.Record {
	if ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil {
		return nil
	}
	var failures []validating.ValidationFailureValue
	if raw, ok := ev.Annotations[AnnotationValidationFailure]; ok {
		if err := json.Unmarshal([]byte(raw), &failures); err != nil {
			// The failures cannot be read, but the event's exemptions are
			// separate annotations and are still recorded below.
			logf.FromContext(ctx).Error(err, "audit event with an unreadable validation failure annotation; its exemptions are still recorded", "auditID", ev.AuditID)
			failures = nil
		}
	}
	exempted := h.exempted(ev)
	if len(failures) == 0 && len(exempted) == 0 {
		return nil
	}
	req := Request(ev)
	// ServeHTTP answered only a caller with the sink's token.
	req.CallerAuthenticated = true
	v := &webhook.Verdict{Allowed: true}
	for _, f := range failures {
		rule, ok := h.Rules(f.Policy)
		if !ok {
			continue // another owner's policy
		}
		a := action(f.ValidationActions)
		if a == webhook.ActionDeny {
			v.Allowed = false
		}
		v.Violations = append(v.Violations, webhook.Violation{Rule: rule, Action: a, Message: f.Message})
	}
	v.Exempted = exempted
	if len(v.Violations) == 0 && len(v.Exempted) == 0 {
		return nil
	}
	ctx = logf.IntoContext(ctx, logf.FromContext(ctx).WithValues(audit.RequestLogValues(req)...))
	return h.Recorder.Record(ctx, req, v)
}

// exempted reads the violations PolicyExceptions exempted from the
// audit annotations the rewritten policies publish
// (exceptions.AuditKey, "<policy>/exempt"), in policy order.
func (h *Handler) exempted(ev *auditv1.Event) []webhook.ExemptViolation {
	var out []webhook.ExemptViolation
	for k, value := range ev.Annotations {
		policy, ok := strings.CutSuffix(k, "/"+exceptions.AuditKey)
		if !ok {
			continue
		}
		rule, ok := h.Rules(policy)
		if !ok {
			continue // another owner's policy
		}
		e, message, ok := exceptions.ParseAudit(value)
		if !ok {
			continue
		}
		out = append(out, webhook.ExemptViolation{Violation: webhook.Violation{Rule: rule, Action: webhook.ActionExempt, Message: message}, Exemption: e})
	}
	slices.SortFunc(out, func(a, b webhook.ExemptViolation) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// action is the verdict a binding's validationActions give: Deny or Warn
// where present (each with Audit, which makes the apiserver report it),
// else Audit.
func action(actions []admissionregistrationv1.ValidationAction) webhook.Action {
	switch {
	case slices.Contains(actions, admissionregistrationv1.Deny):
		return webhook.ActionDeny
	case slices.Contains(actions, admissionregistrationv1.Warn):
		return webhook.ActionWarn
	}
	return webhook.ActionAudit
}

// Request is the admission request an audit event describes, as the
// webhook would have seen it: the user (the impersonated one when set),
// the operation from the verb, the kind from the resource (shepherd's
// kinds; the resource itself otherwise), namespace, name, dry run from the
// request URI. The audit ID stands in for the admission request's UID,
// which audit events do not carry.
func Request(ev *auditv1.Event) *webhook.Request {
	ref := ev.ObjectRef
	req := &webhook.Request{
		UID:       ev.AuditID,
		Operation: operation(ev.Verb),
		Kind:      metav1.GroupVersionKind{Group: ref.APIGroup, Version: ref.APIVersion, Kind: kind(ref.APIGroup, ref.Resource)},
		Resource:  metav1.GroupVersionResource{Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource},
		Namespace: ref.Namespace,
		Name:      ref.Name,
		UserInfo:  ev.User,
	}
	if ev.ImpersonatedUser != nil {
		req.UserInfo = *ev.ImpersonatedUser
	}
	if u, err := url.Parse(ev.RequestURI); err == nil {
		req.DryRun = len(u.Query()["dryRun"]) > 0
	}
	return req
}

// operation maps an audit verb to the admission operation.
func operation(verb string) admissionv1.Operation {
	switch verb {
	case "create":
		return admissionv1.Create
	case "update", "patch", "apply":
		return admissionv1.Update
	case "delete", "deletecollection":
		return admissionv1.Delete
	}
	return admissionv1.Operation(strings.ToUpper(verb))
}

// kind is the kind of a resource shepherd admits (celrules.WebhookKinds),
// or the resource name for anything else.
func kind(group, resource string) string {
	for _, k := range celrules.WebhookKinds {
		if k.Group == group && k.Resource == resource {
			return k.Kind
		}
	}
	return resource
}

// ChainRules resolves policy names against the rules of chain (built-in
// and WorkloadPolicies), as celrules.PolicyName names their exports.
func ChainRules(rules func() []celrules.RuleInfo) RuleResolver {
	return func(policy string) (string, bool) {
		for _, r := range rules() {
			if celrules.PolicyName(r.ID, r.Source) == policy {
				return r.ID, true
			}
		}
		// A policy exported from a WorkloadPolicy since deleted: still
		// shepherd's, by its name.
		if name, ok := strings.CutPrefix(policy, celrules.PolicyName("", celrules.SourcePolicy)); ok && name != "" {
			return name, true
		}
		return "", false
	}
}
