package serve

// The native admission mode: `shepherd serve --admission-mode=native`.
//
// In the webhook mode (the default) the apiserver sends every CREATE and
// UPDATE of the kinds shepherd admits to its two webhooks, and the chain
// runs everything: defaulters, CEL rules, WorkloadPolicies, lookups. In the
// native mode the apiserver runs whatever an admission policy can express
// itself — the built-in CEL rules as the ValidatingAdmissionPolicies of
// `shepherd export vap --audit`, the defaulters but D-WL-1 as the
// MutatingAdmissionPolicies of `shepherd export map` (both installed by
// deploy/native or the chart's admission.mode=native) — and the webhooks
// are narrowed, by rules and matchConditions, to the requests only shepherd
// can answer: D-WL-1, V-TJ-3, V-TJ-4, V-PCLQ-1 (lookups of other objects)
// and V-TR-7 (discovery). This file is the mode's wiring:
//
//   - the chain stops running what the policies run (webhook.Chain.SetNative),
//     so no violation gets two verdicts or two audit records;
//   - WorkloadPolicies are exported by serve itself, each as a
//     ValidatingAdmissionPolicy and binding owned by the policy
//     (policyExporter), since the narrowed webhook no longer sees the
//     requests they match;
//   - the apiserver's audit events come back to the audit trail through the
//     audit sink (webhook/auditsink) at /audit-sink on the webhook server.
//
// The mode's flags are nativeOptions, defined here; serve.go calls
// registerAdmission in place of server.Register. That keeps the mode in
// one file beside serve.go.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/auditsink"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// The admission modes.
const (
	admissionModeWebhook = "webhook"
	admissionModeNative  = "native"
)

// nativeOptions are the native mode's flags.
type nativeOptions struct {
	mode string
	// tokenFile holds the audit sink's bearer token. It is read on every
	// request, so a rotated Secret (or one created after the pod) takes
	// effect without a restart.
	tokenFile string
	// maxSinkBytes bounds one EventList.
	maxSinkBytes int64
}

// addFlags defines the mode's flags on fs.
func (n *nativeOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&n.mode, "admission-mode", n.mode, "webhook: the webhooks run every rule and default. "+
		"native: the apiserver runs the exported ValidatingAdmissionPolicies and MutatingAdmissionPolicies (deploy/native, or the chart's admission.mode=native; MutatingAdmissionPolicy v1 needs Kubernetes >= 1.36) "+
		"and the narrowed webhooks only what needs shepherd (D-WL-1, V-TJ-3, V-TJ-4, V-TR-7, V-PCLQ-1); serve exports each WorkloadPolicy as a ValidatingAdmissionPolicy and binding, "+
		"and records the policies' verdicts from the apiserver's audit events posted to "+auditsink.Path+" on the webhook port.")
	fs.StringVar(&n.tokenFile, "audit-sink-token-file", n.tokenFile, "native mode: file holding the bearer token the apiserver's audit webhook backend presents to "+auditsink.Path+" (the token of the user in its --audit-webhook-config-file); read on every request. Unset or empty, the sink refuses every request.")
	fs.Int64Var(&n.maxSinkBytes, "audit-sink-max-bytes", n.maxSinkBytes, "native mode: largest audit EventList accepted at "+auditsink.Path+"; larger ones are answered 413.")
}

// validate checks --admission-mode.
func (n *nativeOptions) validate() error {
	switch n.mode {
	case admissionModeWebhook, admissionModeNative:
		return nil
	}
	return fmt.Errorf("--admission-mode must be %s or %s, got %q", admissionModeWebhook, admissionModeNative, n.mode)
}

// registerAdmission is server.Register, then the admission mode's wiring.
func registerAdmission(mgr manager.Manager, n *nativeOptions, chain admissionChain, rec *audit.Recorder, probe *integrations.WorkloadAPIProbe, opts server.Options) error {
	if err := server.Register(mgr, chain, rec, probe, opts); err != nil {
		return err
	}
	if n.mode != admissionModeNative {
		return nil
	}
	c, ok := chain.(*webhook.Chain)
	if !ok {
		return fmt.Errorf("--admission-mode=native needs shepherd's admission chain, got %T", chain)
	}
	c.SetNative(true)
	log := mgr.GetLogger().WithName("native")
	if n.tokenFile == "" {
		log.Info("--audit-sink-token-file is not set: the audit sink refuses every request, so the exported policies' verdicts are not audited")
	}
	mgr.GetWebhookServer().Register(auditsink.Path, &auditsink.Handler{
		Recorder:     rec,
		Rules:        auditsink.ChainRules(c.Rules),
		Token:        tokenFromFile(n.tokenFile),
		MaxBodyBytes: n.maxSinkBytes,
		Log:          log.WithName("audit-sink"),
	})
	if err := setupPolicyExporter(mgr, c); err != nil {
		return err
	}
	if err := exceptions.SetupNative(mgr, clock.RealClock{}); err != nil {
		return err
	}
	log.Info("native admission mode: the apiserver runs the exported policies; the webhooks answer lookups, discovery and D-WL-1",
		"auditSink", auditsink.Path)
	return nil
}

// tokenFromFile reads the token on every call; "" (refuse) when the file
// is unset, missing or empty.
func tokenFromFile(path string) func() string {
	return func() string {
		if path == "" {
			return ""
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
}

// Permissions of the native mode (for RBAC generation; test/rbac checks
// the shipped RBAC of that mode grants them): server-side apply (patch,
// and create for the first) and delete.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=create;patch;delete

// policyExporter keeps every WorkloadPolicy that compiles applied as the
// ValidatingAdmissionPolicy and binding it exports as (shepherd-policy-NAME,
// as `shepherd export vap --policy` writes it, with Audit added to the
// binding's actions for the audit sink), owned by the policy so that
// deleting it deletes them (the garbage collector), and deletes them itself
// when the policy is deleted or no longer compiles: a policy that does not
// compile is not enforced in either mode. It runs on every replica, like
// the WorkloadPolicy controller: each applies the same objects with the
// same field manager, which server-side apply makes idempotent, and
// admission of new policies does not wait for a leader.
type policyExporter struct {
	client client.Client
	chain  *webhook.Chain
}

// exportResync re-applies every policy this often: the schemas the rules
// are type-checked against change with CRD upgrades, which can make a
// policy compile or stop compiling (webhook.Chain.SetSchemas compiles the
// policies it holds again, and SetPolicy below reads that outcome).
const exportResync = 5 * time.Minute

func setupPolicyExporter(mgr manager.Manager, chain *webhook.Chain) error {
	e := &policyExporter{client: mgr.GetClient(), chain: chain}
	// A PolicyException changes the export of the policies it names:
	// export them all again (a cluster has few of either).
	everyPolicy := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list shepherdv1alpha1.WorkloadPolicyList
		if err := e.client.List(ctx, &list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing WorkloadPolicies to export them with a changed PolicyException")
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, p := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
		return out
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("workloadpolicy-export").
		For(&shepherdv1alpha1.WorkloadPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&shepherdv1alpha1.PolicyException{}, everyPolicy, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(e)
	if err != nil {
		return fmt.Errorf("setting up the WorkloadPolicy export: %w", err)
	}
	return nil
}

func (e *policyExporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	name := celrules.PolicyName(req.Name, celrules.SourcePolicy)
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := e.client.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, e.delete(ctx, name)
		}
		return ctrl.Result{}, fmt.Errorf("reading WorkloadPolicy %s: %w", req.Name, err)
	}
	if p.DeletionTimestamp != nil {
		return ctrl.Result{}, e.delete(ctx, name)
	}
	// The WorkloadPolicy controller compiles the same generation into the
	// chain; the engine compiles a resourceVersion once, so whichever of the
	// two comes first compiles and the other reads the outcome.
	if errs := e.chain.SetPolicy(p); len(errs) > 0 {
		return ctrl.Result{RequeueAfter: exportResync}, e.delete(ctx, name)
	}
	vaps, bindings := e.chain.Engine().Export()
	i := slices.IndexFunc(vaps, func(v *admissionregistrationv1.ValidatingAdmissionPolicy) bool { return v.Name == name })
	if i < 0 {
		return ctrl.Result{}, fmt.Errorf("WorkloadPolicy %s compiled but the engine exports no %s", p.Name, name)
	}
	owner := []metav1.OwnerReference{{
		APIVersion: shepherdv1alpha1.GroupVersion.String(), Kind: "WorkloadPolicy",
		Name: p.Name, UID: p.UID,
	}}
	vap, binding := vaps[i], bindings[i]
	// The exceptions are read here, not from the chain: the chain's are
	// set by another controller, which may not have seen the change that
	// brought this reconcile yet. The apiserver has no clock, so the
	// export is done again at the next expiry.
	requeue := exportResync
	items, err := exceptions.Stored(ctx, e.client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("exporting WorkloadPolicy %s: %w", p.Name, err)
	}
	set, _ := exceptions.NewSet(items) // the PolicyException controller reports bad ones
	now := time.Now()
	set.ExemptVAP(p.Name, vap, now)
	if next, ok := set.NextExpiry(now); ok && next.Sub(now) < requeue {
		requeue = next.Sub(now) + time.Second
	}
	vap.OwnerReferences, binding.OwnerReferences = owner, owner
	binding.Spec.ValidationActions = celrules.WithAudit(binding.Spec.ValidationActions)
	for _, obj := range []client.Object{vap, binding} {
		if err := e.apply(ctx, obj); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying %s of WorkloadPolicy %s: %w", name, p.Name, err)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func (e *policyExporter) apply(ctx context.Context, obj client.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	// An apply configuration names only what shepherd owns: no server-set
	// metadata, no status (the apiserver's type-checking warnings).
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return e.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(api.FieldManager), client.ForceOwnership)
}

// delete removes the binding, then the policy, of an exported WorkloadPolicy.
func (e *policyExporter) delete(ctx context.Context, name string) error {
	var errs []error
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
	} {
		if err := e.client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, name, err))
		}
	}
	return errors.Join(errs...)
}
