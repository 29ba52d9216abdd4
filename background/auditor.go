package background

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// DefaultDebounce is how long a pass waits after the first change that
// asked for it, so that a burst of creates (or a kubectl apply of many
// policies) is one pass.
const DefaultDebounce = 2 * time.Second

// versionPoll is how often the auditor looks whether the chain's rule set
// changed: an atomic read, so it can be frequent.
const versionPoll = 500 * time.Millisecond

// Chain is what the audit needs of the admission chain.
type Chain interface {
	Validate(ctx context.Context, req *webhook.Request) *webhook.Verdict
	// RuleSetVersion changes whenever the rules Validate applies change.
	RuleSetVersion() uint64
	// Rules lists the rules; the WorkloadPolicies among them are enforced.
	Rules() []celrules.RuleInfo
}

// Options configures an Auditor.
type Options struct {
	Chain Chain
	// Recorder receives the violations newly found (nil: none recorded).
	Recorder *audit.Recorder
	// Interval between passes that judge every object again (a new epoch);
	// 0: no periodic pass.
	Interval time.Duration
	// Debounce (DefaultDebounce if 0) delays a pass after a change.
	Debounce time.Duration
	// ExcludedNamespaces are never audited.
	ExcludedNamespaces []string
	// Samples per rule (DefaultSamples if 0).
	Samples int
	Clock   clock.WithTicker
	// Reports, when set, receives every pass's findings (OpenReports).
	Reports ReportSink
	// CPUShare is the most of its time a pass spends judging objects
	// (DefaultCPUShare if 0; 1: no pauses): after each batch it pauses so
	// that the batch's work is at most this share of batch and pause.
	CPUShare float64
}

// DefaultCPUShare keeps a pass to a quarter of its time: on a 2-vCPU
// machine 12,000 objects take about 6 s, and admission beside a pass
// stays near its idle latency (make bench-audit).
const DefaultCPUShare = 0.25

// Auditor runs the background audit in the leadership terms given to
// Runnable, over the kinds given to Watch. It lives as long as the
// process, so the verdicts of one term serve the next.
type Auditor struct {
	opts Options

	mu    sync.Mutex
	kinds []schema.GroupVersionKind
	kick  chan struct{}

	// passMu serializes passes (terms never overlap; this is for safety).
	passMu sync.Mutex
	core   Core
	epoch  uint64
	series map[[2]string]bool // the violation gauge's series set

	results atomic.Pointer[Results]
	// seen stamps when each finding was first found, for Reports
	// (passes are serialized by passMu).
	seen firstSeen
}

// New returns an auditor; it audits nothing until given kinds (Watch) and
// a term (Runnable).
func New(opts Options) *Auditor {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.CPUShare <= 0 || opts.CPUShare > 1 {
		opts.CPUShare = DefaultCPUShare
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	excluded := map[string]bool{}
	for _, ns := range opts.ExcludedNamespaces {
		excluded[ns] = true
	}
	return &Auditor{
		opts:   opts,
		kick:   make(chan struct{}, 1),
		core:   Core{Samples: opts.Samples, ExcludedNamespaces: excluded},
		series: map[[2]string]bool{},
		seen:   firstSeen{},
	}
}

// Watch adds kinds to audit (a framework became active); the running term
// starts watching them at its next pass.
func (a *Auditor) Watch(gvks ...schema.GroupVersionKind) {
	a.mu.Lock()
	for _, g := range gvks {
		if !slices.Contains(a.kinds, g) {
			a.kinds = append(a.kinds, g)
		}
	}
	a.mu.Unlock()
	a.trigger()
}

// Results is the last pass's aggregate; nil before the first pass and
// while this replica does not lead.
func (a *Auditor) Results() *Results { return a.results.Load() }

func (a *Auditor) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Runnable is the audit of one leadership term, run by the term's manager
// mgr with its client, over informers of its own that run as long as the
// term (newInformer).
func (a *Auditor) Runnable(mgr manager.Manager) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		log := mgr.GetLogger().WithName("audit")
		(&term{a: a, mgr: mgr, informers: map[schema.GroupVersionKind]*kindInformer{}}).run(ctrl.LoggerInto(ctx, log))
		return nil
	})
}

// term is one leadership term's audit loop.
type term struct {
	// reported: the term has handed its first pass to the reports.
	reported  bool
	a         *Auditor
	mgr       manager.Manager
	dyn       dynamic.Interface
	informers map[schema.GroupVersionKind]*kindInformer
}

// kindInformer is the informer of one audited kind and the registration
// of the handler that asks for passes.
type kindInformer struct {
	inf toolscache.SharedIndexInformer
	reg toolscache.ResourceEventHandlerRegistration
}

func (t *term) run(ctx context.Context) {
	a := t.a
	defer a.endTerm()

	var interval <-chan time.Time
	if a.opts.Interval > 0 {
		tk := a.opts.Clock.NewTicker(a.opts.Interval)
		defer tk.Stop()
		interval = tk.C()
	}
	poll := a.opts.Clock.NewTicker(versionPoll)
	defer poll.Stop()
	due, periodic := true, false // a term starts with a pass
	var passedVersion uint64
	for {
		if due {
			if !sleep(ctx, a.opts.Clock, a.opts.Debounce) {
				return
			}
			select { // this pass covers the changes of the debounce window
			case <-a.kick:
			default:
			}
			v, ok := t.pass(ctx, periodic)
			if !ok {
				return
			}
			passedVersion, due, periodic = v, false, false
		}
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
			due = true
		case <-interval:
			due, periodic = true, true
		case <-poll.C():
			due = a.opts.Chain.RuleSetVersion() != passedVersion
		}
	}
}

// pass runs one pass and returns the chain version it ran under; false
// when ctx ended.
func (t *term) pass(ctx context.Context, periodic bool) (uint64, bool) {
	a, log := t.a, ctrl.LoggerFrom(ctx)
	if !t.hook(ctx) {
		return 0, false
	}
	a.passMu.Lock()
	defer a.passMu.Unlock()
	chainVersion := a.opts.Chain.RuleSetVersion()
	if periodic {
		a.epoch++
	}
	version := fmt.Sprintf("%d.%d", chainVersion, a.epoch)
	var objs []*Object
	for _, k := range t.informers {
		for _, o := range k.inf.GetStore().List() {
			if o, ok := o.(*Object); ok {
				objs = append(objs, o)
			}
		}
	}

	start := a.opts.Clock.Now()
	res, fresh, st, err := a.core.Pass(webhook.WithCachedLookups(ctx), objs, version, paced(a.opts.Chain.Validate, a.opts.CPUShare), start)
	if err != nil {
		return 0, false
	}
	took := a.opts.Clock.Since(start)
	passDuration.Observe(took.Seconds())
	evaluations.WithLabelValues("evaluated").Add(float64(st.Evaluated))
	evaluations.WithLabelValues("reused").Add(float64(st.Reused))
	auditedObjects.Set(float64(res.Objects))
	a.results.Store(res)
	if a.opts.Reports != nil {
		// Only the reports read the stamps.
		a.seen.stamp(res)
	}
	a.setGauge(res)
	if a.opts.Recorder != nil && len(fresh) > 0 {
		a.opts.Recorder.RecordStored(ctx, records(fresh))
	}
	if st.Evaluated > 0 || st.Dropped > 0 || periodic {
		log.Info("audit pass", "ruleSetVersion", version, "objects", res.Objects, "violating", res.Violating,
			"evaluated", st.Evaluated, "reused", st.Reused, "dropped", st.Dropped, "newViolations", len(fresh), "took", took.String())
	}
	if a.opts.Chain.RuleSetVersion() != chainVersion {
		// The rules changed under the pass: the next one, due at once,
		// writes the statuses.
		return chainVersion, true
	}
	t.writeStatus(ctx, res, periodic)
	if st.Evaluated > 0 || st.Dropped > 0 || periodic || !t.reported {
		t.syncReports(ctx, res)
		t.reported = true
	}
	return chainVersion, true
}

// paced is validate run at most share of the time: after every pacedBatch
// evaluations it waits so that they took share of batch and wait.
// Judging an object allocates tens of kilobytes (the CEL activations of
// every rule); flat out, a pass allocates so fast that what it allocates
// while the collector marks counts as live, and the heap grows to twice
// that. At half speed, 12,000 objects took about 3 s instead of 1.4 s and
// shepherd's peak RSS was about 10% lower (make bench-audit, Go defaults:
// 299-308 MiB against 331-336 MiB), and admission shares the CPU with
// less of the audit.
func paced(validate ValidateFunc, share float64) ValidateFunc {
	n := 0
	var from time.Time
	return func(ctx context.Context, req *webhook.Request) *webhook.Verdict {
		if n%pacedBatch == 0 {
			if n > 0 {
				// The pause ends with the pass's context: a term that ends
				// mid-pass must not hold up shutdown.
				t := time.NewTimer(pauseAfter(time.Since(from), share))
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			from = time.Now()
		}
		n++
		return validate(ctx, req)
	}
}

// pauseAfter is the pause after a batch that took took, for the batch to
// be share of batch and pause.
func pauseAfter(took time.Duration, share float64) time.Duration {
	return time.Duration(float64(took) * (1 - share) / share)
}

// pacedBatch is how many evaluations run between pauses: short pauses, a
// few milliseconds each, so a pass still ends soon after its context does.
const pacedBatch = 32

// hook makes sure every kind to audit has its informer running in this
// term and synced; a kind whose informer cannot start (its CRD gone) is
// tried again at the next pass. False when ctx ended.
func (t *term) hook(ctx context.Context) bool {
	a, log := t.a, ctrl.LoggerFrom(ctx)
	a.mu.Lock()
	kinds := slices.Clone(a.kinds)
	a.mu.Unlock()
	for _, gvk := range kinds {
		if _, ok := t.informers[gvk]; ok {
			continue
		}
		k, err := t.start(ctx, gvk)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			log.Error(err, "watching a kind to audit; trying again at the next pass", "kind", gvk.String())
			continue
		}
		t.informers[gvk] = k
	}
	for {
		synced := true
		for _, k := range t.informers {
			synced = synced && k.reg.HasSynced()
		}
		if synced {
			return true
		}
		if !sleep(ctx, a.opts.Clock, 50*time.Millisecond) {
			return false
		}
	}
}

// start runs the informer of gvk until the term ends.
func (t *term) start(ctx context.Context, gvk schema.GroupVersionKind) (*kindInformer, error) {
	if t.dyn == nil {
		dyn, err := dynamic.NewForConfigAndClient(t.mgr.GetConfig(), t.mgr.GetHTTPClient())
		if err != nil {
			return nil, err
		}
		t.dyn = dyn
	}
	m, err := t.mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	inf, err := newInformer(t.dyn, gvk, m.Resource)
	if err != nil {
		return nil, err
	}
	a := t.a
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.trigger() },
		UpdateFunc: a.onUpdate,
		DeleteFunc: func(any) { a.trigger() },
	})
	if err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	return &kindInformer{inf: inf, reg: reg}, nil
}

// onUpdate asks for a pass unless the change cannot change a verdict (a
// status write: same generation, labels and annotations).
func (a *Auditor) onUpdate(oldObj, obj any) {
	old, ok1 := oldObj.(*Object)
	o, ok2 := obj.(*Object)
	if !ok1 || !ok2 || old.Generation != o.Generation || old.meta != o.meta ||
		(old.DeletionTimestamp == nil) != (o.DeletionTimestamp == nil) {
		a.trigger()
	}
}

// endTerm forgets the term's results (its informers stop with it): a
// standby neither audits nor exports the gauge (the next leader does), but
// the verdicts stay for the next term.
func (a *Auditor) endTerm() {
	a.passMu.Lock()
	defer a.passMu.Unlock()
	a.results.Store(nil)
	for s := range a.series {
		violationsGauge.DeleteLabelValues(s[0], s[1])
	}
	a.series = map[[2]string]bool{}
	auditedObjects.Set(0)
}

// setGauge sets shepherd_audit_violations to res, deleting the series of
// (rule, kind) pairs no longer violating; a.passMu is held.
func (a *Auditor) setGauge(res *Results) {
	now := map[[2]string]bool{}
	for rule, rr := range res.Rules {
		for kind, n := range rr.ByKind {
			k := [2]string{rule, audit.KindLabel(kind)}
			now[k] = true
			violationsGauge.WithLabelValues(k[0], k[1]).Set(float64(n))
		}
	}
	for s := range a.series {
		if !now[s] {
			violationsGauge.DeleteLabelValues(s[0], s[1])
		}
	}
	a.series = now
}

// records are the audit records of the violations newly found.
func records(fresh []NewFinding) []audit.Record {
	out := make([]audit.Record, 0, len(fresh))
	for _, f := range fresh {
		out = append(out, audit.Record{
			RequestUID: string(f.UID),
			APIVersion: f.APIVersion, Kind: f.Kind, Namespace: f.Namespace, Name: f.Name,
			Rule: f.Rule, Action: f.Action, Field: f.Field, Message: f.Message,
		})
	}
	return out
}

// Permissions writeStatus needs (for RBAC generation; test/rbac checks the
// shipped RBAC grants them).
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadpolicies/status,verbs=get;patch

// writeStatus patches the audit fields of every WorkloadPolicy whose
// figures changed (every enforced one on the interval's pass). A failed
// write is logged; the next pass writes it again.
func (t *term) writeStatus(ctx context.Context, res *Results, refresh bool) {
	log := ctrl.LoggerFrom(ctx)
	c := t.mgr.GetClient()
	var list shepherdv1alpha1.WorkloadPolicyList
	if err := c.List(ctx, &list); err != nil {
		log.Error(err, "listing WorkloadPolicies to write the audit's figures")
		return
	}
	enforced := map[string]bool{}
	for _, r := range t.a.opts.Chain.Rules() {
		if r.Source == celrules.SourcePolicy {
			enforced[r.ID] = true
		}
	}
	now := metav1.NewTime(res.Time)
	for i := range list.Items {
		p := &list.Items[i]
		patch, needed, err := StatusPatch(p, res, enforced[p.Name], refresh, now)
		if err != nil || !needed {
			continue
		}
		if err := c.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			log.Error(err, "writing the audit's figures to a WorkloadPolicy's status", "policy", p.Name)
		}
	}
}

// ServeHTTP serves the last pass's Results as JSON; ?namespace= keeps the
// violating objects of one namespace. 503 before the first pass and on a
// replica that does not lead (the leader audits).
func (a *Auditor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "only GET is supported", http.StatusMethodNotAllowed)
		return
	}
	res := a.Results()
	if res == nil {
		http.Error(w, "no audit pass on this replica yet: the leader replica runs the background audit", http.StatusServiceUnavailable)
		return
	}
	if ns, ok := r.URL.Query()["namespace"]; ok {
		cp := *res
		cp.Namespaces = map[string][]ObjectResult{}
		if objs, ok := res.Namespaces[ns[0]]; ok {
			cp.Namespaces[ns[0]] = objs
		}
		res = &cp
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res) // an error here is the client gone
}

// sleep waits d on clk, false if ctx ended first.
func sleep(ctx context.Context, clk clock.WithTicker, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
