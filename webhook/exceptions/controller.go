package exceptions

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	shepherdevents "github.com/shepherd-k8s/shepherd/events"
)

// invalidAdvice ends the note of an exception that does not validate; the
// errors before it are cut so that the note stays within the Events API's
// limit and this survives.
const invalidAdvice = "; an unknown rule exempts nothing, a bad selector leaves the whole exception out"

// Sink is what enforces the exceptions: the admission chain.
type Sink interface {
	SetExceptions(s *Set)
}

var inForce = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "shepherd_policy_exceptions",
	Help: "PolicyExceptions in force on this replica (not expired, selectors parsed).",
})

func init() { metrics.Registry.MustRegister(inForce) }

// EventReasonInvalid is the reason of the Event on an exception that does
// not parse or names no known rule.
const EventReasonInvalid = "InvalidException"

// Reconciler keeps the sink's exceptions those stored in the cluster. Every
// replica runs it (admission does not wait for a leader). Whatever changed,
// it reads them all from the cache and hands the sink one new Set; it comes
// back at the next expiry and hands it a Set again, so what depends on the
// rules in force (the background audit, the native mode's export) runs
// again then, although the chain itself reads expiries per request.
type Reconciler struct {
	client client.Client
	sink   Sink
	clock  clock.PassiveClock
	events events.EventRecorder
	// builtin are the built-in rule IDs; a rule that is none of them and
	// no stored WorkloadPolicy's name gets an Event on the exception.
	builtin []string
}

// key is the one request the controller works on: any change reloads them
// all.
var key = reconcile.Request{}

// +kubebuilder:rbac:groups=shepherd.dev,resources=policyexceptions,verbs=get;list;watch

// Setup registers the reconciler with the manager.
func Setup(mgr ctrl.Manager, sink Sink, clk clock.PassiveClock, builtin []string) (*Reconciler, error) {
	r := &Reconciler{client: mgr.GetClient(), sink: sink, clock: clk, builtin: builtin,
		events: mgr.GetEventRecorder(api.FieldManager)}
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{key}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("policyexception").
		Watches(&shepherdv1alpha1.PolicyException{}, one, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("setting up the PolicyException controller: %w", err)
	}
	return r, nil
}

// Reconcile loads every stored exception into the sink.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	ptrs, err := Stored(ctx, r.client)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, p := range ptrs {
		if bad := Validate(p, func(rule string) bool { return r.known(ctx, rule) }); len(bad) > 0 && r.events != nil {
			r.events.Eventf(p, nil, corev1.EventTypeWarning, EventReasonInvalid, "Load",
				"%s%s", shepherdevents.Truncate(bad.ToAggregate().Error(), shepherdevents.MaxNoteBytes-len(invalidAdvice)), invalidAdvice)
		}
	}
	set, err := NewSet(ptrs)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("exceptions left out", "reason", err.Error())
	}
	r.sink.SetExceptions(set)
	now := r.clock.Now()
	active := 0
	for i := range set.items {
		if !set.items[i].expired(now) {
			active++
		}
	}
	inForce.Set(float64(active))
	if next, ok := set.NextExpiry(now); ok {
		return reconcile.Result{RequeueAfter: next.Sub(now) + time.Millisecond}, nil
	}
	return reconcile.Result{}, nil
}

// known reports whether rule is a built-in rule or a stored WorkloadPolicy.
func (r *Reconciler) known(ctx context.Context, rule string) bool {
	if slices.Contains(r.builtin, rule) {
		return true
	}
	err := r.client.Get(ctx, client.ObjectKey{Name: rule}, &shepherdv1alpha1.WorkloadPolicy{})
	return err == nil || !apierrors.IsNotFound(err) // unsure is no reason for a warning
}
