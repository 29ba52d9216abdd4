package policies

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

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

// applied identifies the policy generation the chain was last given.
type applied struct {
	uid        types.UID
	generation int64
	ok         bool
}

// Reconciler loads WorkloadPolicies into the Sink.
type Reconciler struct {
	Client client.Client
	Sink   Sink
	Clock  clock.PassiveClock

	mu      sync.Mutex
	applied map[string]applied

	// recheck queues every policy again after the schemas changed.
	recheck        chan event.GenericEvent
	schemasApplied atomic.Bool
}

// Setup registers the controller. It runs on every replica: each one serves
// admission and so needs every policy compiled.
func Setup(mgr ctrl.Manager, sink Sink, clk clock.PassiveClock) (*Reconciler, error) {
	r := &Reconciler{Client: mgr.GetClient(), Sink: sink, Clock: clk, recheck: make(chan event.GenericEvent)}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("workloadpolicy").
		// Status writes bump resourceVersion, not generation: skip them.
		For(&shepherdv1alpha1.WorkloadPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.recheck, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("setting up the WorkloadPolicy controller: %w", err)
	}
	return r, nil
}

// Reconcile compiles the policy's current generation into the chain and
// writes the outcome to its status.
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

	errs := r.load(p)
	if len(errs) > 0 {
		log.Info("WorkloadPolicy failed to compile; not applied", "generation", p.Generation, "errors", errs.ToAggregate().Error())
	} else {
		log.V(1).Info("WorkloadPolicy compiled and enforced", "generation", p.Generation)
	}

	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	want := DesiredStatus(p, errs, metav1.NewTime(clk.Now()))
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

// load hands p to the sink unless this very generation was already given
// (periodic resyncs must not recompile), and returns the compile errors.
func (r *Reconciler) load(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied == nil {
		r.applied = map[string]applied{}
	}
	if a, ok := r.applied[p.Name]; ok && a.uid == p.UID && a.generation == p.Generation && a.ok {
		return nil
	}
	errs := r.Sink.SetPolicy(p)
	if len(errs) > 0 {
		// Not applied at all: the chain must not keep enforcing an older
		// generation the admin has replaced.
		r.Sink.DeletePolicy(p.Name)
		compileErrors.WithLabelValues(p.Name).Inc()
	}
	r.applied[p.Name] = applied{uid: p.UID, generation: p.Generation, ok: len(errs) == 0}
	r.updateGauge()
	return errs
}

func (r *Reconciler) remove(name string) {
	r.Sink.DeletePolicy(name)
	r.mu.Lock()
	delete(r.applied, name)
	r.updateGauge()
	r.mu.Unlock()
}

// updateGauge sets shepherd_workload_policies; r.mu is held.
func (r *Reconciler) updateGauge() {
	var ok, failed float64
	for _, a := range r.applied {
		if a.ok {
			ok++
		} else {
			failed++
		}
	}
	policiesLoaded.WithLabelValues("true").Set(ok)
	policiesLoaded.WithLabelValues("false").Set(failed)
}

// ReadyChecker is ready once every WorkloadPolicy in the cache has had its
// current generation compiled (successfully or not): before that, this
// replica would admit requests some policy should deny.
func (r *Reconciler) ReadyChecker(req *http.Request) error {
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
		return fmt.Errorf("WorkloadPolicies not compiled yet: %v", pending)
	}
	return nil
}
