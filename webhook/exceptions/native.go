package exceptions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

// NativeReconciler keeps the built-in rules' admission policies installed
// in the cluster (deploy/native, the chart's admission.mode=native)
// honouring the exceptions, in serve's native mode, where the apiserver
// runs them and the chain never sees their requests. It rewrites only the
// ValidatingAdmissionPolicies and MutatingAdmissionPolicies an exception in
// force names (ExemptVAP, ExemptMAP, on the installed object itself, so
// nothing else of it changes), and restores those it rewrote once no
// exception names them (UnexemptVAP), by a merge patch of the fields the
// rewrite touches: it never creates a policy the admin did not install.
// The apiserver has no clock, so it comes back at the next expiry; and
// every resync, to repair a rewrite an upgrade of the installed policies
// undid. The WorkloadPolicies' exported policies are the policy exporter's
// (serve/native.go), which applies the exceptions itself.
type NativeReconciler struct {
	client client.Client
	reader client.Reader
	clock  clock.PassiveClock
}

// errChanged is a policy changed between its read and its patch.
var errChanged = errors.New("changed since read")

// nativeResync is how often the installed policies are checked anyway.
const nativeResync = 5 * time.Minute

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;mutatingadmissionpolicies,verbs=list;patch
// +kubebuilder:rbac:groups=shepherd.dev,resources=policyexceptions,verbs=get;list;watch

// SetupNative registers the native mode's reconciler with the manager.
func SetupNative(mgr ctrl.Manager, clk clock.PassiveClock) error {
	r := &NativeReconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), clock: clk}
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{key}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("policyexception-native").
		Watches(&shepherdv1alpha1.PolicyException{}, one).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the PolicyException export of the native mode: %w", err)
	}
	// Once at start, with no exception stored: restore what a deleted
	// one left rewritten while no replica ran.
	return mgr.Add(runOnce(func(ctx context.Context) error {
		_, err := r.Reconcile(ctx, key)
		return err
	}))
}

type runOnce func(ctx context.Context) error

func (f runOnce) Start(ctx context.Context) error {
	if err := f(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "restoring the installed admission policies from stale exceptions; the next change or resync retries")
	}
	return nil
}

func (runOnce) NeedLeaderElection() bool { return false }

// Reconcile rewrites or restores every installed built-in policy.
func (r *NativeReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	items, err := Stored(ctx, r.client)
	if err != nil {
		return reconcile.Result{}, err
	}
	set, _ := NewSet(items) // the PolicyException controller reports bad ones
	now := r.clock.Now()
	sel := client.MatchingLabels{"app.kubernetes.io/managed-by": api.FieldManager}

	var errs []error
	var vaps admissionregistrationv1.ValidatingAdmissionPolicyList
	if err := r.reader.List(ctx, &vaps, sel); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the installed ValidatingAdmissionPolicies: %w", err)
	}
	for i := range vaps.Items {
		have := &vaps.Items[i]
		rule, ok := builtinRule(have.ObjectMeta)
		if !ok {
			continue
		}
		want := have.DeepCopy()
		set.ExemptVAP(rule, want, now)
		if equality.Semantic.DeepEqual(want.Spec, have.Spec) && equality.Semantic.DeepEqual(want.Annotations, have.Annotations) {
			continue
		}
		errs = append(errs, r.patch(ctx, have, want.Annotations, map[string]any{"variables": want.Spec.Variables, "validations": want.Spec.Validations, "auditAnnotations": want.Spec.AuditAnnotations}))
	}
	var maps admissionregistrationv1.MutatingAdmissionPolicyList
	if err := r.reader.List(ctx, &maps, sel); err != nil {
		// A cluster may not serve MutatingAdmissionPolicy v1 (before
		// Kubernetes 1.36): the defaulters then stay the webhook's.
		ctrl.LoggerFrom(ctx).V(1).Info("not listing MutatingAdmissionPolicies", "reason", err.Error())
	}
	for i := range maps.Items {
		have := &maps.Items[i]
		rule, ok := builtinRule(have.ObjectMeta)
		if !ok {
			continue
		}
		want := have.DeepCopy()
		if _, err := set.ExemptMAP(rule, want, now); err != nil {
			errs = append(errs, err)
			continue
		}
		if equality.Semantic.DeepEqual(want.Spec, have.Spec) && equality.Semantic.DeepEqual(want.Annotations, have.Annotations) {
			continue
		}
		errs = append(errs, r.patch(ctx, have, want.Annotations, map[string]any{"variables": want.Spec.Variables, "mutations": want.Spec.Mutations}))
	}
	changed := false
	errs = slices.DeleteFunc(errs, func(err error) bool {
		changed = changed || errors.Is(err, errChanged)
		return err == nil || errors.Is(err, errChanged)
	})
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if changed {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	requeue := nativeResync
	if next, ok := set.NextExpiry(now); ok && next.Sub(now) < requeue {
		requeue = next.Sub(now) + time.Second
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// builtinRule is the built-in rule an installed policy carries; a
// WorkloadPolicy's export is not one.
func builtinRule(m metav1.ObjectMeta) (string, bool) {
	rule := m.Labels[celrules.LabelRule]
	if rule == "" || m.Name != celrules.PolicyName(rule, celrules.SourceBuiltin) {
		return "", false
	}
	return rule, true
}

// patch merges the rewritten fields into the installed policy, guarded by
// its resourceVersion: a policy changed since it was read is left to the
// next pass. A null removes what the rewrite added.
func (r *NativeReconciler) patch(ctx context.Context, have client.Object, annotations map[string]string, spec map[string]any) error {
	ann := map[string]any{AnnotationExceptions: nil, AnnotationExpires: nil}
	for k, v := range annotations {
		ann[k] = v
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": have.GetResourceVersion(), "annotations": ann},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, have, client.RawPatch(types.MergePatchType, body), client.FieldOwner(api.FieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			// Changed since read: another replica's patch, or an
			// upgrade. Not an error; the next pass reads it again.
			return errChanged
		}
		return fmt.Errorf("patching %T %s with the exceptions: %w", have, have.GetName(), err)
	}
	ctrl.LoggerFrom(ctx).Info("installed admission policy set to the exceptions in force", "policy", have.GetName(), "exceptions", annotations[AnnotationExceptions])
	return nil
}
