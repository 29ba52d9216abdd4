package celrules

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Engine holds the compiled built-in rules and WorkloadPolicies and
// evaluates them. It is safe for concurrent use: evaluations read an
// immutable snapshot while SetPolicy and DeletePolicy swap it.
type Engine struct {
	cfg     Config
	schemas *Schemas

	builtins []*compiledRule // enabled built-ins, in library order
	// defaults are the defaulting rules as compiled
	// MutatingAdmissionPolicies, in table order (Default).
	defaults []*compiledDefault
	infos    []RuleInfo // every built-in, enabled or not
	// webhooks are the cluster's validating webhook configurations, the
	// evidence of upstream webhooks (SetUpstreamWebhooks).
	webhooks []admissionregistrationv1.ValidatingWebhookConfiguration

	mu       sync.RWMutex
	policies map[string]*compiledRule
	// names are the keys of policies, sorted: the order policies are
	// evaluated in, kept as they come and go rather than sorted again on
	// every change.
	names []string
	// given holds every policy last given to SetPolicy, compiled or not, so
	// a change of schemas can compile each one again.
	given map[string]*shepherdv1alpha1.WorkloadPolicy
	// failed caches the errors of a policy version that did not compile, so
	// a resync of the same resourceVersion does not compile it again.
	failed map[string]failedPolicy
	// ordered is the snapshot evaluations read: built-ins then policies by
	// name. It is replaced, never mutated, and so is its index. A change
	// of the rules only marks it stale; the first reader after the change
	// rebuilds it (fresh). Rebuilding on every change made loading n
	// policies cost n rebuilds of n rules: 10,000 WorkloadPolicies took
	// minutes (issue 32).
	ordered []*compiledRule
	index   *candidates
	stale   atomic.Bool
	// overlay holds the policies changed since ordered was built, which
	// evaluations apply over it (current) until there are too many.
	overlay *overlay
	// version counts the changes to the rule set (Version).
	version atomic.Uint64
	// checked keeps CheckPolicy's compilations for SetPolicy.
	checked checkedPolicies
}

type failedPolicy struct {
	resourceVersion string
	errs            field.ErrorList
}

// NewEngine compiles the built-in library against cfg.Schemas (the pinned
// upstream schemas when nil; compiled once per schema set) and switches
// rules on and off per cfg.
func NewEngine(cfg Config) (*Engine, error) {
	s := cfg.Schemas
	if s == nil {
		var err error
		if s, err = PinnedSchemas(); err != nil {
			return nil, err
		}
	}
	e := &Engine{cfg: cfg, policies: map[string]*compiledRule{}, given: map[string]*shepherdv1alpha1.WorkloadPolicy{}, failed: map[string]failedPolicy{}}
	if err := e.useSchemas(s); err != nil {
		return nil, err
	}
	e.ordered = slices.Clone(e.builtins)
	e.index = newCandidates(e.ordered)
	return e, nil
}

// useSchemas compiles the built-ins against s; e.mu must be held (or e not
// yet shared).
func (e *Engine) useSchemas(s *Schemas) error {
	active, inactive, err := CompileBuiltins(s)
	if err != nil {
		return err
	}
	// The configuration names the schemas in use, never the ones replaced:
	// those and the rules compiled against them can then be freed.
	e.cfg.Schemas = s
	rules, err := BuiltinRules()
	if err != nil {
		return err
	}
	byID := map[string]*compiledRule{}
	for _, cr := range active {
		byID[cr.rule.ID] = cr
	}
	var builtins []*compiledRule
	var infos []RuleInfo
	up := e.upstreamState(s)
	for _, r := range rules {
		enabled := e.cfg.Enabled(r.ID)
		var info RuleInfo
		by, upstream := up.EnforcedAll(r.groupKinds(), r.Upstream)
		if cr, ok := byID[r.ID]; ok {
			info = cr.info()
			info.EnforcedUpstream = by
			switch {
			case upstream && e.cfg.StandDown:
				info.Inactive = "enforced by " + by
				info.Reason = "inactive: " + info.Inactive
			case enabled:
				builtins = append(builtins, cr)
			}
		} else {
			info = RuleInfo{ID: r.ID, Kinds: r.kinds(), Action: string(r.action()), Source: SourceBuiltin,
				Description: r.Description, Inactive: inactive[r.ID], Reason: "inactive: " + inactive[r.ID], OnUpdate: readsOfRule(&r).onUpdate()}
		}
		info.Enabled = enabled
		infos = append(infos, info)
	}
	defaults, err := compileDefaults(e.cfg)
	if err != nil {
		return err
	}
	e.schemas, e.builtins, e.infos, e.defaults = s, builtins, infos, defaults
	return nil
}

// SetSchemas type-checks every rule again against s — the schemas the
// cluster serves changed (a CRD installed or upgraded) — and makes the
// result active at once: built-ins whose fields s lacks become inactive,
// ones it now has become active, and every policy given is compiled again
// (PolicyErrors then reports its new outcome).
func (e *Engine) SetSchemas(s *Schemas) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.useSchemas(s); err != nil {
		return err
	}
	e.policies, e.names = map[string]*compiledRule{}, nil
	e.failed = map[string]failedPolicy{}
	for _, p := range e.given {
		e.compilePolicy(p)
	}
	e.changed()
	e.version.Add(1)
	return nil
}

// upstreamState is what the Upstream evidence of the rules is judged
// against with schemas s.
func (e *Engine) upstreamState(s *Schemas) UpstreamState {
	return UpstreamState{Schemas: s, Webhooks: e.webhooks, Own: e.cfg.OwnWebhooks}
}

// Upstream is the engine's current upstream state, for the Go checks'
// evidence (package webhook).
func (e *Engine) Upstream() UpstreamState {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.upstreamState(e.schemas)
}

// StandsDown reports whether the engine leaves upstream-enforced rules to
// upstream (Config.StandDown).
func (e *Engine) StandsDown() bool { return e.cfg.StandDown }

// SetUpstreamWebhooks gives the engine the cluster's validating webhook
// configurations, the evidence that an upstream webhook enforces a rule;
// a built-in rule they enforce becomes inactive under StandDown, and one
// whose webhook went away active again. It reports whether the rule set
// changed (and then its Version).
func (e *Engine) SetUpstreamWebhooks(hooks []admissionregistrationv1.ValidatingWebhookConfiguration) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	before := e.inactive()
	e.webhooks = hooks
	if err := e.useSchemas(e.schemas); err != nil {
		return false, err
	}
	if maps.Equal(before, e.inactive()) {
		return false, nil
	}
	e.changed()
	e.version.Add(1)
	return true, nil
}

// Version identifies the rule set evaluations see: it changes whenever a
// policy is set (compiled or not) or deleted and whenever the schemas
// change, and never otherwise. The background audit keys its verdicts on
// it, so a stored object is judged again only when the rules changed.
func (e *Engine) Version() uint64 { return e.version.Load() }

// Inactive lists the built-in rules that do not type-check against the
// engine's schemas, by ID, with the reason.
func (e *Engine) Inactive() map[string]string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.inactive()
}

func (e *Engine) inactive() map[string]string {
	out := map[string]string{}
	for _, info := range e.infos {
		if info.Inactive != "" {
			out[info.ID] = info.Inactive
		}
	}
	return out
}

func (cr *compiledRule) info() RuleInfo {
	return RuleInfo{
		ID:          cr.rule.ID,
		Kinds:       cr.rule.kinds(),
		Action:      string(cr.action),
		Exportable:  true,
		Source:      cr.source,
		Description: cr.rule.Description,
		Enabled:     true,
		OnUpdate:    cr.judgesUpdateOf,
	}
}

// SetPolicy compiles and type-checks a WorkloadPolicy and, when it compiles,
// makes it active in place of its previous version. When it does not, the
// policy is not applied at all (its previous version is removed too) and
// the errors are returned for its status, one per expression. A version
// already seen (same name and resourceVersion) is not compiled again.
//
// Compiling takes no lock: policies given at once (the controller runs
// several workers) compile in parallel, and admissions never wait for a
// compile.
func (e *Engine) SetPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	rv := p.ResourceVersion
	e.mu.RLock()
	if cur, ok := e.policies[p.Name]; ok && rv != "" && cur.resourceVersion == rv {
		e.mu.RUnlock()
		return nil
	}
	if f, ok := e.failed[p.Name]; ok && rv != "" && f.resourceVersion == rv {
		e.mu.RUnlock()
		return f.errs
	}
	schemas := e.schemas
	e.mu.RUnlock()

	var cr *compiledRule
	var errs field.ErrorList
	if cp := e.checked.take(p, schemas); cp != nil {
		cr, errs = cp.cr, cp.errs // compiled at admission (CheckPolicy)
	} else {
		cr, errs = compileRule(RuleFromPolicy(p), SourcePolicy, environment.NewExpressions, schemas)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	e.given[p.Name] = p.DeepCopy()
	if e.schemas != schemas {
		// The schemas changed while p compiled: compile it against the
		// new ones (SetSchemas compiled only the policies given before).
		errs = e.compilePolicy(p)
	} else {
		e.record(p, cr, errs)
	}
	e.changedPolicy(p.Name)
	e.version.Add(1)
	return errs
}

// compilePolicy compiles p against the current schemas and records the
// outcome; e.mu must be held.
func (e *Engine) compilePolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	cr, errs := compileRule(RuleFromPolicy(p), SourcePolicy, environment.NewExpressions, e.schemas)
	e.record(p, cr, errs)
	return errs
}

// record keeps the outcome of compiling p; e.mu must be held.
func (e *Engine) record(p *shepherdv1alpha1.WorkloadPolicy, cr *compiledRule, errs field.ErrorList) {
	rv := p.ResourceVersion
	if len(errs) > 0 {
		e.drop(p.Name)
		e.failed[p.Name] = failedPolicy{resourceVersion: rv, errs: errs}
	} else {
		cr.resourceVersion = rv
		e.put(p.Name, cr)
		delete(e.failed, p.Name)
	}
}

// DeletePolicy removes a WorkloadPolicy.
func (e *Engine) DeletePolicy(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, known := e.given[name]; known {
		e.version.Add(1)
	}
	e.drop(name)
	delete(e.given, name)
	delete(e.failed, name)
	e.changedPolicy(name)
}

// put makes cr the compiled policy of name, keeping names sorted (the
// evaluation order); e.mu must be held.
func (e *Engine) put(name string, cr *compiledRule) {
	if _, ok := e.policies[name]; !ok {
		i, _ := slices.BinarySearch(e.names, name)
		e.names = slices.Insert(e.names, i, name)
	}
	e.policies[name] = cr
}

// drop removes the compiled policy of name; e.mu must be held.
func (e *Engine) drop(name string) {
	if _, ok := e.policies[name]; !ok {
		return
	}
	delete(e.policies, name)
	if i, found := slices.BinarySearch(e.names, name); found {
		e.names = slices.Delete(e.names, i, i+1)
	}
}

// changed marks the evaluation snapshot stale; e.mu must be held.
func (e *Engine) changed() { e.stale.Store(true) }

// changedPolicy records that the policy name was set or deleted: over the
// snapshot while few changed, else by marking it stale; e.mu must be held.
func (e *Engine) changedPolicy(name string) {
	if e.stale.Load() {
		return // rebuilt before any evaluation, with this change
	}
	e.overlay = e.overlay.with(name, e.policies[name])
	if len(e.overlay.byName) > maxOverlay {
		e.changed()
	}
}

// fresh returns the evaluation snapshot and its index with every change
// in, rebuilding them first when the rules changed since.
func (e *Engine) fresh() ([]*compiledRule, *candidates) {
	e.mu.RLock()
	if !e.stale.Load() && e.overlay == nil {
		defer e.mu.RUnlock()
		return e.ordered, e.index
	}
	e.mu.RUnlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stale.Load() || e.overlay != nil {
		e.reorder()
	}
	return e.ordered, e.index
}

// current returns the snapshot's index and the policies changed since,
// which Evaluate applies over it; it rebuilds the snapshot first only when
// it is stale: the built-ins or the schemas changed, or more than
// maxOverlay policies did.
func (e *Engine) current() (*candidates, *overlay) {
	if e.stale.Load() {
		e.mu.Lock()
		if e.stale.Load() {
			e.reorder()
		}
		e.mu.Unlock()
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.index, e.overlay
}

// reorder rebuilds the evaluation snapshot with every change in; e.mu
// must be held.
func (e *Engine) reorder() {
	ordered := make([]*compiledRule, 0, len(e.builtins)+len(e.names))
	ordered = append(ordered, e.builtins...)
	for _, n := range e.names {
		ordered = append(ordered, e.policies[n])
	}
	e.ordered = ordered
	e.index = newCandidates(ordered)
	e.overlay = nil
	e.stale.Store(false)
}

func (e *Engine) snapshot() []*compiledRule {
	ordered, _ := e.fresh()
	return ordered
}

// candidatesFor returns the rules of the snapshot that may match a request
// for gr, in evaluation order, the index that narrows them by namespace,
// and the policies changed since (current).
func (e *Engine) candidatesFor(gr schema.GroupResource) ([]*compiledRule, *namespaceIndex, *overlay) {
	index, ov := e.current()
	return index.of(gr), index.byNamespace[gr], ov
}

// Rules lists every built-in rule (enabled or not) and every active policy.
func (e *Engine) Rules() []RuleInfo {
	e.mu.RLock()
	out := slices.Clone(e.infos)
	e.mu.RUnlock()
	for _, cr := range e.snapshot() {
		if cr.source == SourcePolicy {
			out = append(out, cr.info())
		}
	}
	return out
}

// Export renders every enabled built-in rule and every active policy as the
// ValidatingAdmissionPolicy the engine evaluates it as, with a binding that
// applies it where shepherd's webhooks apply, in evaluation order.
func (e *Engine) Export() ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	var vaps []*admissionregistrationv1.ValidatingAdmissionPolicy
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, cr := range e.snapshot() {
		_, b := exportRule(cr.rule, cr.reads, cr.source, nil, e.cfg.Namespace)
		vap := cr.policy.DeepCopy()
		namedPolicy(cr.rule.ID, vap)
		vaps = append(vaps, vap)
		bindings = append(bindings, b)
	}
	return vaps, bindings
}

// Schemas returns the schemas the engine type-checks with.
func (e *Engine) Schemas() *Schemas {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.schemas
}

// Input is one admission request as the engine sees it.
type Input struct {
	Operation string // CREATE, UPDATE, DELETE, CONNECT
	Group     string
	Version   string
	Kind      string
	Resource  string
	Namespace string
	Name      string
	// Object and OldObject are the decoded JSON (numbers as int64/float64,
	// as apimachinery decodes them); nil when absent.
	Object    map[string]any
	OldObject map[string]any
	// Namespaces looks up the request's namespace, for namespaceSelector
	// and namespaceObject (the informer cache in the webhook, the manifests
	// given offline); nil finds none. A namespace it cannot find fails a
	// rule with a namespaceSelector as the apiserver fails the policy: 404.
	Namespaces func(ctx context.Context, name string) (*corev1.Namespace, error)
	UserInfo   authenticationv1.UserInfo
	DryRun     bool
	UID        string
}

// Result is one failed validation (or evaluation failure) of one rule.
type Result struct {
	Rule    string
	Action  shepherdv1alpha1.Action
	Field   string
	Message string
	// Reason is the field error type: FieldValueInvalid or
	// FieldValueForbidden.
	Reason string
	// EvalError is set when the rule could not be evaluated (runtime error,
	// cost limit, budget) rather than failing a validation.
	EvalError bool
	// TimedOut is set on an EvalError when the rule was stopped because
	// the request's deadline passed.
	TimedOut bool
}

// Evaluate runs every enabled rule that matches in against it and returns
// every failed validation, in rule order.
func (e *Engine) Evaluate(ctx context.Context, in *Input) []Result {
	r := newRequest(ctx, in)
	gr := schema.GroupResource{Group: in.Group, Resource: in.Resource}
	rules, byNS, changed := e.candidatesFor(gr)
	if byNS != nil && in.Namespace != "" && in.Resource != "namespaces" {
		// A namespace that cannot be found is the matcher's to answer.
		if ns, err := r.namespace(in.Namespace); err == nil {
			rules = byNS.narrow(rules, ns.Labels)
		}
	}
	if changed != nil {
		rules = changed.apply(rules, gr)
	}
	var out []Result
	for _, cr := range rules {
		start := time.Now()
		res := cr.evaluate(r)
		if ctx.Err() != nil {
			res = cr.outOfTime(res, time.Since(start), ctx)
		}
		out = append(out, res...)
	}
	return out
}

// outOfTime names the deadline in the results of a rule evaluated while
// the request's time ran out. cel-go checks the context every
// celconfig.CheckFrequency comprehension steps (the apiserver's own
// programs are built with cel.InterruptCheckFrequency), so a rule whose
// cost stays under the budget but whose wall time does not — a nested
// all() over a long list — is stopped at the deadline instead of running
// past the webhook's timeout, where the apiserver's failurePolicy would
// answer for every rule at once. The rule still fails by its own
// failurePolicy (evalError); rules without comprehensions are never
// interrupted, so their verdicts stand even after the deadline.
func (cr *compiledRule) outOfTime(res []Result, spent time.Duration, ctx context.Context) []Result {
	for i := range res {
		// Only an interrupted evaluation ran out of time: a rule that
		// failed otherwise (a missing key) after the deadline keeps its
		// own error.
		if !res[i].EvalError || !strings.Contains(res[i].Message, "operation interrupted") {
			continue
		}
		deadline := ""
		if d, ok := ctx.Deadline(); ok {
			deadline = fmt.Sprintf(" at %s", d.UTC().Format("15:04:05.000"))
		}
		msg := fmt.Sprintf("rule %s ran out of time: it was stopped after %s because the request's deadline passed%s (%v); make its expressions cheaper (fewer nested comprehensions over long lists) or the object smaller",
			cr.rule.ID, spent.Round(time.Millisecond), deadline, context.Cause(ctx))
		if cr.rule.failurePolicy() == shepherdv1alpha1.FailurePolicyIgnore {
			msg += " (ignored: failurePolicy Ignore)"
		}
		res[i].Message = msg
		res[i].TimedOut = true
	}
	return res
}
