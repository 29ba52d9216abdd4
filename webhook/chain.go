package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	kjson "sigs.k8s.io/json"

	"github.com/shepherd-k8s/shepherd/api/install"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

var scheme = install.NewScheme()

// RuleDecode names the violation of a request whose object cannot be
// decoded.
const RuleDecode = "decode"

// ChainOptions configures the admission chain.
type ChainOptions struct {
	// Lookups answers the Go checks' questions about other objects and
	// discovery. Nil means nothing can be found and the Workload API is
	// served (the offline default).
	Lookups Lookups
	// Rules switches built-in rules on and off and configures defaulting.
	Rules celrules.Config
	// CheckSchemas validates every object against its kind's schema first,
	// as the apiserver would, and denies a field of the wrong type with the
	// apiserver's message (schemaCheck): for `shepherd check`, which has no
	// apiserver in front of it.
	CheckSchemas bool
	// Clock is the time PolicyExceptions expire by; nil is the real clock.
	Clock clock.PassiveClock
}

// Chain is shepherd's admission chain: the kind's defaulter, then the CEL
// rules of celrules and the Go checks that need lookups. It is safe for
// concurrent use, also while policies are set and deleted.
type Chain struct {
	checkSchemas bool
	lookups      Lookups
	cfg          celrules.Config
	engine       *celrules.Engine
	// native is the native admission mode (SetNative).
	native atomic.Bool
	// goDown are the Go checks an upstream layer enforces (goStandDowns).
	goDown atomic.Pointer[map[string]string]
	// goChanges counts the changes of goDown and of the native mode
	// (Version).
	goChanges atomic.Uint64
	// exceptions are the PolicyExceptions in force (SetExceptions), read
	// against clock; exceptionChanges counts their changes
	// (RuleSetVersion).
	exceptions       atomic.Pointer[exceptions.Set]
	exceptionChanges atomic.Uint64
	clock            clock.PassiveClock
}

var _ Admitter = (*Chain)(nil)

// NewChain compiles the built-in library and returns the chain.
func NewChain(opts ChainOptions) (*Chain, error) {
	e, err := celrules.NewEngine(opts.Rules)
	if err != nil {
		return nil, fmt.Errorf("compiling the built-in rules: %w", err)
	}
	l := opts.Lookups
	if l == nil {
		l = NewObjectLookups(nil, true)
	}
	// The chain's defaulters read the engine's schemas (they change with the
	// cluster's CRDs); its copy of the configuration holds none, so the
	// schemas it was built with are not kept once replaced.
	cfg := opts.Rules
	cfg.Schemas = nil
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Chain{lookups: l, cfg: cfg, engine: e, checkSchemas: opts.CheckSchemas, clock: clk}, nil
}

// SetPolicy compiles and type-checks a WorkloadPolicy. When it compiles it
// replaces the previous version of the policy atomically; when it does not,
// the policy is not applied at all (its previous version is removed too)
// and the errors, one per expression, are returned for its status.
func (c *Chain) SetPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	return c.engine.SetPolicy(p)
}

// CheckPolicy returns the errors SetPolicy would return for p, and keeps
// nothing.
func (c *Chain) CheckPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	return c.engine.CheckPolicy(p)
}

// DeletePolicy removes a WorkloadPolicy.
func (c *Chain) DeletePolicy(name string) { c.engine.DeletePolicy(name) }

// SetSchemas type-checks every CEL rule again against s, the schemas the
// cluster serves now.
func (c *Chain) SetSchemas(s *celrules.Schemas) error {
	err := c.engine.SetSchemas(s)
	c.refreshGoStandDowns()
	return err
}

// Schemas returns the schemas the rules are compiled against.
func (c *Chain) Schemas() *celrules.Schemas { return c.engine.Schemas() }

// RuleSetVersion identifies the rules Validate applies: it changes when a
// policy is set or deleted or the schemas change (celrules.Engine.Version),
// and when the exceptions are set (SetExceptions). Both counters only grow,
// so their sum changes whenever either does.
func (c *Chain) RuleSetVersion() uint64 {
	return c.engine.Version() + c.exceptionChanges.Load()
}

// InactiveRules lists the built-in rules that are not enforced although
// enabled, with why: their fields are missing from the schemas the cluster
// serves, or (serve) the CRD or an upstream webhook enforces them.
func (c *Chain) InactiveRules() map[string]string {
	out := c.engine.Inactive() // a fresh map
	for id, why := range c.goStandDowns() {
		out[id] = why
	}
	return out
}

// SetUpstreamWebhooks gives the chain the cluster's validating webhook
// configurations (celrules.Engine.SetUpstreamWebhooks), for the CEL rules
// and the Go checks alike; it reports whether the rules in force changed.
func (c *Chain) SetUpstreamWebhooks(hooks []admissionregistrationv1.ValidatingWebhookConfiguration) (bool, error) {
	before := c.goStandDowns()
	changed, err := c.engine.SetUpstreamWebhooks(hooks)
	if err != nil {
		return false, err
	}
	c.refreshGoStandDowns()
	if !maps.Equal(before, c.goStandDowns()) {
		c.goChanges.Add(1)
		changed = true
	}
	return changed, nil
}

// Version changes whenever the rules in force do: the engine's rule set
// (RuleSetVersion) or the Go checks an upstream layer enforces. Both only
// grow, so their sum changes exactly when either does.
func (c *Chain) Version() uint64 { return c.engine.Version() + c.goChanges.Load() }

// UpdateReads is what the rules in force read of an object on UPDATE
// (celrules.Engine.UpdateReads).
func (c *Chain) UpdateReads() celrules.Reads { return c.engine.UpdateReads() }

// goChecks are the rules the integrations write in Go
// (integrations.Checks), and goOperations the operations each judges; a
// defaulting rule works on CREATE and UPDATE.
var (
	goChecks     = sync.OnceValue(integrations.Checks)
	goOperations = sync.OnceValue(func() map[string][]string {
		out := map[string][]string{}
		for _, g := range goChecks() {
			if g.Validate != nil {
				out[g.ID] = g.Operations
			}
		}
		return out
	})
)

// HasWork reports whether shepherd's mutating (or validating) webhook has
// anything to do for an op request on gr: an enabled defaulter for its
// kind (the mutating webhook), or an active rule, WorkloadPolicy or Go
// check (the validating webhook). In native mode the apiserver runs what
// the admission policies express, so only what they cannot is left. A
// resource whose kind the chain does not know keeps every call.
func (c *Chain) HasWork(mutating bool, gr schema.GroupResource, op string) bool {
	kind, ok := c.engine.Schemas().KindForResource(gr)
	if !ok {
		return true
	}
	native := c.native.Load()
	down := c.goStandDowns()
	for _, g := range goRules() {
		defaulter := g.Action == "Default"
		if defaulter != mutating || !slices.Contains(g.Kinds, kind) || !c.cfg.Enabled(g.ID) {
			continue
		}
		if _, upstream := down[g.ID]; upstream || (native && g.Exportable) {
			continue
		}
		if ops, ok := goOperations()[g.ID]; ok && !slices.Contains(ops, op) {
			continue
		}
		if defaulter && op != "CREATE" && op != "UPDATE" {
			continue
		}
		return true
	}
	return !mutating && !native && c.engine.Judges(gr, op)
}

// goUpstream is the evidence that an upstream layer enforces a Go check
// (celrules.Upstream, as the built-in rules carry it in their files): the
// upstream webhook its integration names (gocheck.Check.UpstreamWebhook).
var goUpstream = sync.OnceValue(func() map[string]upstreamEvidence {
	out := map[string]upstreamEvidence{}
	for _, g := range goChecks() {
		for _, k := range g.Kinds {
			if g.UpstreamWebhook != "" {
				out[g.ID] = upstreamEvidence{schema.GroupKind{Group: g.Group, Kind: k},
					[]celrules.Upstream{{Webhook: &celrules.WebhookEvidence{Name: g.UpstreamWebhook, Operation: g.UpstreamOperation}}}}
			}
		}
	}
	return out
})

// upstreamEvidence is what would enforce a Go check on a kind upstream.
type upstreamEvidence struct {
	kind     schema.GroupKind
	evidence []celrules.Upstream
}

// goStandDowns lists the Go checks an upstream layer enforces on the
// cluster, where the chain stands down (celrules.Config.StandDown); it is
// decided when the schemas or webhooks change, not per request.
func (c *Chain) goStandDowns() map[string]string {
	if m := c.goDown.Load(); m != nil {
		return *m // replaced, never changed: callers only read it
	}
	return nil
}

func (c *Chain) refreshGoStandDowns() {
	out := map[string]string{}
	defer c.goDown.Store(&out)
	if !c.engine.StandsDown() {
		return
	}
	up := c.engine.Upstream()
	for id, g := range goUpstream() {
		if by, ok := up.Enforced(g.kind, g.evidence); ok && c.cfg.Enabled(id) {
			out[id] = "enforced by " + by
		}
	}
}

// SetNative switches the native admission mode on or off. In native mode
// the apiserver itself runs everything a policy can express — the CEL rules
// (built-in and WorkloadPolicies) as the ValidatingAdmissionPolicies
// `shepherd export vap` writes, the defaulters but D-WL-1 as the
// MutatingAdmissionPolicies of `shepherd export map` — so the chain runs
// only what they cannot: D-WL-1 in Default, the Go checks (lookups and
// discovery: V-TJ-3, V-TJ-4, V-TR-7, V-PCLQ-1) in Validate. Running the
// rest here too would give each request a second verdict and a second
// audit record for one violation. `shepherd check` and the webhook mode
// never call it.
func (c *Chain) SetNative(on bool) {
	if c.native.Swap(on) != on {
		c.goChanges.Add(1) // what the webhooks have work for changed (HasWork)
	}
}

// Native reports whether the chain is in native admission mode.
func (c *Chain) Native() bool { return c.native.Load() }

// Engine is the CEL engine of the chain (for export).
func (c *Chain) Engine() *celrules.Engine { return c.engine }

// Rules lists every rule: the CEL rules (built-in and WorkloadPolicies),
// then the Go checks and defaulters (the defaulters export as
// MutatingAdmissionPolicies: celrules.ExportDefaults; the checks cannot).
func (c *Chain) Rules() []celrules.RuleInfo {
	out := c.engine.Rules()
	down := c.goStandDowns()
	for _, g := range goRules() {
		g.Enabled = c.cfg.Enabled(g.ID)
		g.OnUpdate = strings.Join(celrules.GoReads, ", ")
		if up, ok := goUpstream()[g.ID]; ok {
			g.EnforcedUpstream = describeUpstream(up.evidence)
		}
		if why, ok := down[g.ID]; ok {
			g.Inactive, g.Reason = why, "inactive: "+why
		}
		out = append(out, g)
	}
	return out
}

// describeUpstream says what would enforce a Go check upstream, for
// listings made with no cluster at hand.
func describeUpstream(ev []celrules.Upstream) string {
	var out []string
	for _, e := range ev {
		if e.Webhook != nil {
			out = append(out, fmt.Sprintf("webhook %s, where registered (failurePolicy Fail, %s)", e.Webhook.Name, e.Webhook.Operation))
		}
	}
	return strings.Join(out, "; ")
}

const (
	reasonLookup    = "needs a lookup of another object; a ValidatingAdmissionPolicy sees only the request"
	reasonDiscovery = "needs API discovery; a ValidatingAdmissionPolicy sees only the request"
)

// goRules are the rules the chain runs beside the CEL validation rules:
// the defaulting rules, which are MutatingAdmissionPolicies run in-process
// (celrules.Engine.Default) and exported by `shepherd export map`, then
// the integrations' Go checks (goChecks), which need lookups or discovery
// and are not exportable (Reason says why).
var goRules = sync.OnceValue(func() []celrules.RuleInfo {
	out := celrules.DefaultRuleInfos()
	for _, g := range goChecks() {
		action := "Deny"
		if g.Default != nil {
			action = "Default"
		}
		out = append(out, celrules.RuleInfo{ID: g.ID, Kinds: g.Kinds, Action: action, Reason: g.Reason, Source: celrules.SourceGo, Description: g.Description})
	}
	return out
})

// decode parses a request object. The error names what is wrong and where
// (a syntax error's byte offset, or what the value is instead of an
// object). It decodes as apimachinery does (integers as int64), so defaults
// and rules see what the apiserver stores.
func decode(raw []byte, what string) (map[string]any, *Violation) {
	deny := func(format string, args ...any) *Violation {
		return &Violation{Rule: RuleDecode, Action: ActionDeny, Message: fmt.Sprintf("cannot decode the "+what+": "+format, args...)}
	}
	var v any
	if err := utiljson.Unmarshal(raw, &v); err != nil {
		if syntax, offset := kjson.SyntaxErrorOffset(err); syntax {
			return nil, deny("%v (at byte %d)", err, offset)
		}
		return nil, deny("%v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		var got string
		switch v.(type) {
		case nil:
			got = "null"
		case []any:
			got = "an array"
		case string:
			got = "a string"
		case bool:
			got = "a boolean"
		default:
			got = "a number"
		}
		return nil, deny("want a JSON object, got %s", got)
	}
	return m, nil
}

// objects returns the request's object and old object (nil when absent),
// decoded unless the caller already decoded them.
func objects(req *Request) (obj, old map[string]any, bad *Violation) {
	obj, old = req.ObjectValue, req.OldObjectValue
	if obj == nil && len(req.Object) > 0 {
		if obj, bad = decode(req.Object, "object"); bad != nil {
			return nil, nil, bad
		}
	}
	if old == nil && len(req.OldObject) > 0 {
		if old, bad = decode(req.OldObject, "old object"); bad != nil {
			return nil, nil, bad
		}
	}
	return obj, old, nil
}

func denied(v *Violation) *Verdict {
	return &Verdict{Allowed: false, Violations: named([]Violation{*v})}
}

// named sets each violation's message to name shepherd and the rule
// (celrules.Named), as the CEL rules' messages do: kubectl prints the
// message, and it is how a user learns who denied them and which rule to
// read about. The schema check's violations are the apiserver's own text,
// as it would answer them, and are left as they are.
func named(vs []Violation) []Violation {
	for i := range vs {
		if vs[i].Rule != RuleSchema {
			vs[i].Message = celrules.Named(vs[i].Rule, vs[i].Message)
		}
	}
	return vs
}

// namedWarnings names the rule in a defaulter's warnings.
func namedWarnings(rule string, ws []string) []string {
	for i := range ws {
		ws[i] = celrules.Named(rule, ws[i])
	}
	return ws
}

// Default runs the kind's defaulter (the mutating webhook) and returns the
// JSON patch of the defaulted paths.
func (c *Chain) Default(ctx context.Context, req *Request) *Verdict {
	if req.Operation == admissionv1.Delete || req.Operation == admissionv1.Connect {
		return &Verdict{Allowed: true}
	}
	obj, old, bad := objects(req)
	if bad != nil {
		return denied(bad)
	}
	if wrong := c.schemaCheck(req, obj, old); wrong != nil {
		return wrong
	}
	if obj == nil {
		return &Verdict{Allowed: true}
	}
	if req.Operation == admissionv1.Update && !celrules.GoReadsChanged(obj, old) {
		// Nothing a defaulter reads changed (a finalizer, status): the
		// exported defaults skip such UPDATEs too (GoUpdateCondition).
		return &Verdict{Allowed: true, Object: obj}
	}
	v := &Verdict{Allowed: true, Object: obj}
	cfg := c.exemptDefaulters(ctx, req, obj, old, req.Kind.Kind)
	cur, changed := obj, false
	if !c.native.Load() { // else the apiserver runs them as MutatingAdmissionPolicies
		d, err := c.engine.Default(ctx, c.input(req, obj, old), cfg.Enabled)
		if err != nil {
			var de *celrules.DefaultError
			if errors.As(err, &de) {
				return denied(&Violation{Rule: de.Rule, Action: ActionDeny, Message: de.Error()})
			}
			return denied(&Violation{Rule: RuleDecode, Action: ActionDeny, Message: err.Error()})
		}
		cur, changed = d.Object, len(d.Changed) > 0
		for _, w := range d.Warnings {
			v.Warnings = append(v.Warnings, celrules.Named(w.Rule, w.Message))
		}
	}
	copied := changed // cur is already the chain's own object
	for i := range goChecks() {
		g := &goChecks()[i]
		if g.Default == nil || !g.Judges(req.Kind.Group, req.Kind.Kind, string(req.Operation)) || !cfg.Enabled(g.ID) {
			continue
		}
		if !copied {
			cur, copied = runtime.DeepCopyJSON(obj), true // the check writes in place
		}
		wrote, warnings, deny := g.Default(ctx, c.lookups, &gocheck.Request{Operation: string(req.Operation), Namespace: req.Namespace,
			Kind: schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, Object: cur, OldObject: old})
		changed = changed || wrote
		v.Warnings = append(v.Warnings, namedWarnings(g.ID, warnings)...)
		if deny != nil {
			v.Allowed = false
			v.Violations = append(v.Violations, named([]Violation{{Rule: g.ID, Action: ActionDeny, Field: deny.Field, Message: deny.Message, Reason: deny.Reason}})...)
		}
	}
	if changed {
		v.Object = cur
		v.Patch = jsonPatch(obj, cur)
	}
	return v
}

// input is the request as the CEL engine sees it.
func (c *Chain) input(req *Request, obj, old map[string]any) *celrules.Input {
	in := &celrules.Input{
		Operation: string(req.Operation),
		Group:     req.Kind.Group,
		Version:   req.Kind.Version,
		Kind:      req.Kind.Kind,
		Resource:  req.Resource.Resource,
		Namespace: req.Namespace,
		Name:      req.Name,
		Object:    obj,
		OldObject: old,
		UserInfo:  req.UserInfo,
		DryRun:    req.DryRun,
		UID:       string(req.UID),
	}
	if in.Resource == "" {
		in.Resource = c.engine.Schemas().Resource(schema.GroupKind{Group: in.Group, Kind: in.Kind})
	}
	if nl, ok := c.lookups.(NamespaceLookup); ok {
		in.Namespaces = nl.Namespace
	}
	return in
}

// Validate runs the CEL rules and the Go checks on the (already defaulted)
// object and reports every violation at once.
func (c *Chain) Validate(ctx context.Context, req *Request) *Verdict {
	obj, old, bad := objects(req)
	if bad != nil {
		return denied(bad)
	}
	if wrong := c.schemaCheck(req, obj, old); wrong != nil {
		return wrong
	}
	in := c.input(req, obj, old)
	v := &Verdict{Allowed: true, Object: obj}
	if !c.native.Load() { // else the apiserver runs them as ValidatingAdmissionPolicies
		for _, r := range c.engine.Evaluate(ctx, in) {
			v.Violations = append(v.Violations, Violation{Rule: r.Rule, Field: r.Field, Message: r.Message, Action: Action(r.Action), Reason: r.Reason})
		}
	}
	if req.Operation != admissionv1.Update || celrules.GoReadsChanged(obj, old) {
		// Like the rules' UPDATE conditions: an UPDATE that changes
		// nothing the Go checks read is not judged again.
		v.Violations = append(v.Violations, named(c.runGoChecks(ctx, req, obj, old))...)
	}
	v.Violations, v.Exempted = c.exempt(ctx, req, obj, old, v.Violations)
	for _, e := range v.Exempted {
		v.Warnings = append(v.Warnings, exemptWarning(e))
	}
	for _, viol := range v.Violations {
		switch viol.Action {
		case ActionDeny:
			v.Allowed = false
		case ActionWarn:
			v.Warnings = append(v.Warnings, warningText(viol))
		}
	}
	return v
}

// warningText renders a Warn violation as an admission warning.
func warningText(v Violation) string {
	if v.Field == "" {
		return v.Message
	}
	return v.Field + ": " + v.Message
}

// Admit runs Default, then Validate on the defaulted object, as the
// apiserver does with shepherd's mutating and validating webhooks.
func (c *Chain) Admit(ctx context.Context, req *Request) *Verdict {
	d := c.Default(ctx, req)
	if !d.Allowed {
		return d
	}
	// Validate sees the defaulted object Default already holds decoded.
	vreq := *req
	vreq.ObjectValue = d.Object
	v := c.Validate(ctx, &vreq)
	v.Violations = append(d.Violations, v.Violations...)
	v.Exempted = append(d.Exempted, v.Exempted...)
	v.Warnings = append(d.Warnings, v.Warnings...)
	v.Patch = d.Patch
	if d.Object != nil {
		v.Object = d.Object
	}
	return v
}

// runGoChecks runs the integrations' validating Go checks that judge req,
// but those switched off or that an upstream layer enforces.
func (c *Chain) runGoChecks(ctx context.Context, req *Request, o, old map[string]any) []Violation {
	if o == nil {
		return nil
	}
	var out []Violation
	down := c.goStandDowns()
	var r *gocheck.Request
	for i := range goChecks() {
		g := &goChecks()[i]
		if g.Validate == nil || !g.Judges(req.Kind.Group, req.Kind.Kind, string(req.Operation)) || !c.cfg.Enabled(g.ID) {
			continue
		}
		if _, upstream := down[g.ID]; upstream {
			continue
		}
		if r == nil {
			r = &gocheck.Request{Operation: string(req.Operation), Namespace: req.Namespace,
				Kind: schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, Object: o, OldObject: old}
		}
		for _, f := range g.Validate(ctx, c.lookups, r) {
			out = append(out, Violation{Rule: g.ID, Action: ActionDeny, Field: f.Field, Message: f.Message, Reason: f.Reason})
		}
	}
	return out
}
