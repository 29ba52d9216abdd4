package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdevents "github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// verdicts is shepherd_policy_verdicts_total, counted once per record.
var verdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "shepherd_policy_verdicts_total",
	Help: "Deny, Warn and Audit verdicts of admission rules (dry-run requests included), by rule, action and kind (\"other\" for a kind shepherd does not admit).",
}, []string{"rule", "action", "kind"})

// eventsDropped is shepherd_policy_violation_events_dropped_total.
var eventsDropped = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "shepherd_policy_violation_events_dropped_total",
	Help: "PolicyViolation Events not written because their namespace was over its bound (--event-namespace-qps, --event-namespace-burst); the verdicts are still logged, counted and served at /audit.",
})

func init() {
	metrics.Registry.MustRegister(verdicts, eventsDropped)
}

// Recorder writes every verdict of a request to the four audit sinks.
type Recorder struct {
	// Ring keeps the recent records for /audit.
	Ring *Ring
	// Events records a PolicyViolation Event per record of a real (not
	// dry-run) request; nil records none.
	Events events.EventRecorder
	// EventLimit bounds the PolicyViolation Events of each namespace: over
	// it an Event is dropped (and counted), the record kept. Nil bounds
	// none.
	EventLimit *NamespaceLimiter
	// Clock stamps the records.
	Clock clock.PassiveClock
	// SkipDryRun leaves dry-run requests out of the audit trail (by default
	// they are audited, marked dryRun, with no Event: docs/concepts.md,
	// "webhook (the default)").
	SkipDryRun bool
}

// NewRecorder returns a recorder with a ring of ringSize records, its
// Events bounded per namespace by the defaults
// (DefaultEventNamespaceQPS, DefaultEventNamespaceBurst).
func NewRecorder(ringSize int, ev events.EventRecorder, clk clock.PassiveClock) *Recorder {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Recorder{Ring: NewRing(ringSize), Events: ev, Clock: clk,
		EventLimit: NewNamespaceLimiter(DefaultEventNamespaceQPS, DefaultEventNamespaceBurst, clk)}
}

// RequestLogValues are kv and then the key/values naming an admission
// request that every log line about it carries: its logger holds them (the
// webhook handler and the audit sink attach them), so that no line repeats
// them. One allocation: the handler calls it on every request.
func RequestLogValues(req *webhook.Request, kv ...any) []any {
	return append(append(make([]any, 0, len(kv)+10), kv...),
		"uid", req.UID, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)
}

// Record audits every violation of v (Deny, Warn and Audit alike) and returns
// the records written. The context's logger names the request
// (RequestLogValues).
func (r *Recorder) Record(ctx context.Context, req *webhook.Request, v *webhook.Verdict) []Record {
	if v == nil || len(v.Violations)+len(v.Exempted) == 0 || (req.DryRun && r.SkipDryRun) {
		return nil
	}
	log := ctrl.LoggerFrom(ctx)
	now := r.Clock.Now()
	gv := schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()
	out := make([]Record, 0, len(v.Violations)+len(v.Exempted))
	// The violations, then the exempt ones (action Exempt), by index: no
	// copy of them on the admission path.
	for i := range len(v.Violations) + len(v.Exempted) {
		var ev webhook.ExemptViolation
		if i < len(v.Violations) {
			ev.Violation = v.Violations[i]
		} else {
			ev = v.Exempted[i-len(v.Violations)]
			ev.Action = webhook.ActionExempt
		}
		vi := ev.Violation
		rec := Record{
			Time:       now,
			RequestUID: string(req.UID),
			User:       req.UserInfo.Username,
			Groups:     req.UserInfo.Groups,
			Operation:  string(req.Operation),
			APIVersion: gv,
			Kind:       req.Kind.Kind,
			Namespace:  req.Namespace,
			Name:       req.Name,
			Rule:       vi.Rule,
			Action:     string(vi.Action),
			Field:      vi.Field,
			Message:    vi.Message,
			DryRun:     req.DryRun,

			Exception:        ev.Exception,
			ExceptionExpires: ev.Expires,

			CallerAuthenticated: req.CallerAuthenticated,
		}
		// The request's uid, kind, namespace, name and operation are the
		// logger's own (RequestLogValues): repeated here they would be
		// keys twice in one JSON line, which strict pipelines reject.
		log.Info("policy verdict",
			"requestUID", rec.RequestUID, "user", rec.User, "groups", rec.Groups,
			"apiVersion", rec.APIVersion, "rule", rec.Rule,
			"action", rec.Action, "field", rec.Field, "message", rec.Message, "dryRun", rec.DryRun,
			"callerAuthenticated", rec.CallerAuthenticated)
		if rec.Exception != "" {
			log.Info("exempt by a PolicyException", "requestUID", rec.RequestUID, "rule", rec.Rule,
				"exception", rec.Exception, "until", ev.Until())
		}
		verdicts.WithLabelValues(rec.Rule, rec.Action, KindLabel(rec.Kind)).Inc()
		// sideEffects: NoneOnDryRun promises the apiserver that a dry-run
		// request writes nothing, so dry-run verdicts skip the Event.
		if r.Events != nil && !req.DryRun {
			if r.EventLimit.Allow(req.Namespace) {
				r.Events.Eventf(Regarding(req), nil, eventType(vi.Action), api.EventPolicyViolation,
					string(vi.Action), "%s", eventNote(&rec))
			} else {
				eventsDropped.Inc()
			}
		}
		r.Ring.Add(rec)
		out = append(out, rec)
	}
	return out
}

// Regarding is the object a PolicyViolation Event is attached to: the
// admitted object itself. A denied CREATE leaves no object behind, so its
// Event names the would-be object (kind, namespace, name, no UID) — `kubectl
// get events --field-selector regarding.name=NAME` still finds it, and a
// later successful create shows it in `kubectl describe`. A request with no
// name yet (generateName) is attached to its namespace.
func Regarding(req *webhook.Request) runtime.Object {
	gv := schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()
	if req.Name == "" && req.Namespace != "" {
		return &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: req.Namespace}
	}
	ref := &corev1.ObjectReference{APIVersion: gv, Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name}
	if req.Operation != "CREATE" {
		ref.UID = objectUID(req)
	}
	return ref
}

func eventType(a webhook.Action) string {
	if a == webhook.ActionAudit || a == webhook.ActionExempt {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

func eventNote(r *Record) string {
	field := ""
	if r.Field != "" {
		field = " " + r.Field
	}
	dry := ""
	if r.DryRun {
		dry = " (dry run)"
	}
	by := ""
	if r.User != "" {
		by = " by " + r.User
	}
	if !r.CallerAuthenticated {
		// The user is the caller's claim: say so where people read it.
		by += " (caller not authenticated)"
	}
	note := fmt.Sprintf("%s %s%s%s%s: %s", r.Rule, r.Action, by, dry, field, r.Message)
	if r.Exception != "" {
		until := "no expiry"
		if r.ExceptionExpires != nil {
			until = "until " + r.ExceptionExpires.UTC().Format(time.RFC3339)
		}
		note = fmt.Sprintf("%s %s by PolicyException %s (%s)%s%s%s: %s", r.Rule, r.Action, r.Exception, until, by, dry, field, r.Message)
	}
	return shepherdevents.Truncate(note, shepherdevents.MaxNoteBytes)
}

// objectUID reads metadata.uid from the stored object of an UPDATE or DELETE
// without decoding the rest of it.
func objectUID(req *webhook.Request) types.UID {
	obj, raw := req.OldObjectValue, req.OldObject
	if obj == nil && len(raw) == 0 {
		obj, raw = req.ObjectValue, req.Object
	}
	if obj != nil {
		uid, _, _ := unstructured.NestedString(obj, "metadata", "uid")
		return types.UID(uid)
	}
	var m struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return ""
	}
	return m.Metadata.UID
}

// RecordStored audits the violations the background audit newly found on
// stored objects (Operation api.AuditOperation, no user, no request): a
// log line each and the ring, stamped now. No Event — one per object of a
// large cluster would flood the apiserver, and the WorkloadPolicy's status
// sums them up instead — and no shepherd_policy_verdicts_total, which
// counts admission verdicts (the audit has shepherd_audit_violations).
func (r *Recorder) RecordStored(ctx context.Context, recs []Record) {
	log := ctrl.LoggerFrom(ctx)
	now := r.Clock.Now()
	for _, rec := range recs {
		rec.Time = now
		rec.Operation = api.AuditOperation
		log.Info("audit violation",
			"operation", rec.Operation, "apiVersion", rec.APIVersion, "kind", rec.Kind,
			"namespace", rec.Namespace, "name", rec.Name, "rule", rec.Rule,
			"action", rec.Action, "field", rec.Field, "message", rec.Message)
		r.Ring.Add(rec)
	}
}
