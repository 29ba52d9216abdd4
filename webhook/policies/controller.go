package policies

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Sink is what compiles and enforces policies: the admission chain.
// SetPolicy compiles p and, only when that succeeds, replaces the policy of
// that name atomically; DeletePolicy removes it.
type Sink interface {
	SetPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList
	DeletePolicy(name string)
}

var (
	compileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shepherd_policy_compile_errors_total",
		Help: "WorkloadPolicy generations that failed to compile (the policy is then not applied), by policy.",
	}, []string{"policy"})
	policiesLoaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shepherd_workload_policies",
		Help: "WorkloadPolicies known to this replica, by whether they compiled and are enforced (ready=true) or not (ready=false).",
	}, []string{"ready"})
)

func init() {
	metrics.Registry.MustRegister(compileErrors, policiesLoaded)
}

// applied identifies the policy generation the chain was last given, with
// its outcome: the compile errors, or that it was held back over the cap.
type applied struct {
	uid        types.UID
	generation int64
	ok         bool
	overCap    bool
	errs       field.ErrorList
}

// DefaultMaxPolicies is the default of --max-workload-policies: how many
// WorkloadPolicies a replica compiles and enforces. A policy of a few
// validations, compiled, holds some tens of KiB (the apiserver's
// compiled programs, the exported ValidatingAdmissionPolicy, the
// informer's copy); 15,000 keep a replica inside the chart's 512 MiB
// with the built-ins, the caches and admission's own buffers (README's
// reliability section has the measurement).
const DefaultMaxPolicies = 15000

// workers is how many policies compile at once: compiles take no engine
// lock, so loading thousands of policies uses every core.
func workers() int { return min(max(runtime.GOMAXPROCS(0), 2), 8) }

// overCapRetry is how often a policy held back over the cap is tried
// again (others may have been deleted meanwhile).
const overCapRetry = time.Minute

// Reconciler loads WorkloadPolicies into the Sink.
type Reconciler struct {
	Client client.Client
	Sink   Sink
	Clock  clock.PassiveClock
	// MaxPolicies caps the policies compiled (DefaultMaxPolicies if zero);
	// one more is held back with a status saying so.
	MaxPolicies int

	mu      sync.Mutex
	applied map[string]applied
	// compiled counts the applied policies that compiled (ok).
	compiled int

	// recheck queues every policy again after the schemas changed.
	recheck        chan event.GenericEvent
	schemasApplied atomic.Bool
	// loaded queues a policy's status write once its outcome is known.
	loaded chan event.GenericEvent
	// ready latches the first time every policy was compiled: after that
	// a replica serves with the policies it has while new ones compile.
	ready atomic.Bool
}

// Setup registers the controllers. Both run on every replica: each one
// serves admission and so needs every policy compiled, and any replica may
// be the first to know a policy's outcome.
//
// Compiling and writing the outcome to the status are two controllers:
// status writes go at the client's rate (--kube-api-qps) while a compile
// takes milliseconds, and a worker waiting on the rate limiter must not
// hold up the compiles behind it (10,000 policies created at once would
// otherwise be enforced at the pace of their status writes).
func Setup(mgr ctrl.Manager, sink Sink, clk clock.PassiveClock, maxPolicies int) (*Reconciler, error) {
	r := &Reconciler{Client: mgr.GetClient(), Sink: sink, Clock: clk, MaxPolicies: maxPolicies,
		recheck: make(chan event.GenericEvent), loaded: make(chan event.GenericEvent)}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("workloadpolicy").
		// Status writes bump resourceVersion, not generation: skip them.
		For(&shepherdv1alpha1.WorkloadPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.recheck, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: workers()}).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("setting up the WorkloadPolicy controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("workloadpolicy-status").
		WatchesRawSource(source.Channel(r.loaded, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: workers()}).
		Complete(reconcile.Func(r.writeStatus))
	if err != nil {
		return nil, fmt.Errorf("setting up the WorkloadPolicy status controller: %w", err)
	}
	return r, nil
}

// Reconcile compiles the policy's current generation into the chain and
// queues the write of its outcome to its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.remove(req.Name)
			log.Info("WorkloadPolicy deleted; no longer enforced")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading WorkloadPolicy %s: %w", req.Name, err)
	}
	if p.DeletionTimestamp != nil {
		r.remove(p.Name)
		return ctrl.Result{}, nil
	}

	a := r.load(p)
	switch {
	case a.overCap:
		log.Info("WorkloadPolicy not compiled: this replica holds as many as --max-workload-policies allows", "max", r.maxPolicies())
	case len(a.errs) > 0:
		log.Info("WorkloadPolicy failed to compile; not applied", "generation", p.Generation, "errors", a.errs.ToAggregate().Error())
	default:
		log.V(1).Info("WorkloadPolicy compiled and enforced", "generation", p.Generation)
	}
	if r.loaded != nil {
		select {
		case r.loaded <- event.GenericEvent{Object: p}:
		case <-ctx.Done():
			return ctrl.Result{}, ctx.Err()
		}
	}
	if a.overCap {
		return ctrl.Result{RequeueAfter: overCapRetry}, nil
	}
	return ctrl.Result{}, nil
}

// writeStatus writes a policy's compile outcome to its status, once the
// outcome of its current generation is known (Reconcile queues it then).
func (r *Reconciler) writeStatus(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.mu.Lock()
	a, ok := r.applied[p.Name]
	r.mu.Unlock()
	if !ok || a.uid != p.UID || a.generation != p.Generation {
		return ctrl.Result{}, nil // a newer generation compiles; it queues its own write
	}
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	want := DesiredStatus(p, a.errs, metav1.NewTime(clk.Now()))
	if a.overCap {
		want = OverCapStatus(p, r.maxPolicies(), metav1.NewTime(clk.Now()))
	}
	if equality.Semantic.DeepEqual(want, p.Status) {
		return ctrl.Result{}, nil
	}
	orig := p.DeepCopy()
	p.Status = want
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing the status of WorkloadPolicy %s: %w", p.Name, err)
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) maxPolicies() int {
	if r.MaxPolicies > 0 {
		return r.MaxPolicies
	}
	return DefaultMaxPolicies
}

// load hands p to the sink unless this very generation was already given
// (periodic resyncs must not recompile) or the replica holds as many
// policies as it may, and returns the outcome. The sink compiles outside
// r.mu, so several policies compile at once.
func (r *Reconciler) load(p *shepherdv1alpha1.WorkloadPolicy) applied {
	r.mu.Lock()
	if r.applied == nil {
		r.applied = map[string]applied{}
	}
	prev, known := r.applied[p.Name]
	if known && prev.uid == p.UID && prev.generation == p.Generation && prev.ok {
		r.mu.Unlock()
		return prev
	}
	if !(known && prev.ok) && r.compiled >= r.maxPolicies() {
		// Held back, not compiled: a cap reached is a status on the
		// policies over it, not a replica out of memory.
		a := applied{uid: p.UID, generation: p.Generation, overCap: true}
		r.applied[p.Name] = a
		r.updateGauge()
		r.mu.Unlock()
		return a
	}
	r.mu.Unlock()

	errs := r.Sink.SetPolicy(p)
	if len(errs) > 0 {
		// Not applied at all: the chain must not keep enforcing an older
		// generation the admin has replaced.
		r.Sink.DeletePolicy(p.Name)
		compileErrors.WithLabelValues(p.Name).Inc()
	}
	a := applied{uid: p.UID, generation: p.Generation, ok: len(errs) == 0, errs: errs}
	r.mu.Lock()
	r.set(p.Name, a)
	r.updateGauge()
	r.mu.Unlock()
	return a
}

// set records the outcome of name, keeping compiled; r.mu is held.
func (r *Reconciler) set(name string, a applied) {
	if prev, ok := r.applied[name]; ok && prev.ok {
		r.compiled--
	}
	if a.ok {
		r.compiled++
	}
	r.applied[name] = a
}

func (r *Reconciler) remove(name string) {
	r.Sink.DeletePolicy(name)
	r.mu.Lock()
	if prev, ok := r.applied[name]; ok && prev.ok {
		r.compiled--
	}
	delete(r.applied, name)
	r.updateGauge()
	r.mu.Unlock()
}

// updateGauge sets shepherd_workload_policies; r.mu is held.
func (r *Reconciler) updateGauge() {
	policiesLoaded.WithLabelValues("true").Set(float64(r.compiled))
	policiesLoaded.WithLabelValues("false").Set(float64(len(r.applied) - r.compiled))
}

// ReadyChecker is ready once every WorkloadPolicy in the cache has had its
// current generation compiled (successfully or not), and from then on:
// before the first time, this replica would admit requests some policy
// should deny; after it, a policy created later is enforced a moment after
// its create, as on any replica, and taking every replica out of the
// Service while thousands of new policies compile (every admission then
// failing) would be the worse answer.
func (r *Reconciler) ReadyChecker(req *http.Request) error {
	if r.ready.Load() {
		return nil
	}
	list := &shepherdv1alpha1.WorkloadPolicyList{}
	if err := r.Client.List(req.Context(), list); err != nil {
		return fmt.Errorf("listing WorkloadPolicies: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var pending []string
	for i := range list.Items {
		p := &list.Items[i]
		if a, ok := r.applied[p.Name]; !ok || a.uid != p.UID || a.generation != p.Generation {
			pending = append(pending, p.Name)
		}
	}
	if len(pending) > 0 {
		if len(pending) > 10 {
			return fmt.Errorf("%d WorkloadPolicies not compiled yet, among them %v", len(pending), pending[:10])
		}
		return fmt.Errorf("WorkloadPolicies not compiled yet: %v", pending)
	}
	r.ready.Store(true)
	return nil
}
