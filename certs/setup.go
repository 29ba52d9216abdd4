package certs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// BootstrapTimeout bounds the start-up pass that makes sure the certificate
// directory holds a serving pair before the webhook server starts.
const BootstrapTimeout = 2 * time.Minute

// Permissions of the self-signed mode (for RBAC generation; test/rbac
// checks the shipped RBAC of that mode grants them): the Secret and
// shepherd's two webhook configurations, by name (lists and watches by a
// metadata.name field selector); create cannot be limited by name.
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=create,namespace=shepherd-system
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch;patch,namespace=shepherd-system,resourceNames=shepherd-webhook-certs
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;patch,resourceNames=defaults.shepherd.dev
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch;patch,resourceNames=shepherd

// Setup wires the serving certificates into mgr and returns the readiness
// check for /readyz.
//
// In self-signed mode it first makes sure — synchronously, before mgr
// starts — that the Secret holds a valid serving pair and that the pair is in
// opts.CertDir: controller-runtime's webhook server refuses to start without
// the files. It then adds the CA controller (leader only) and the file
// writer (every replica), both watching through a cache restricted to the
// one Secret and the two webhook configurations, so shepherd needs no
// cluster-wide read access to Secrets.
//
// In cert-manager mode the files are mounted; Setup only returns the check.
func Setup(mgr ctrl.Manager, opts Options, clk clock.PassiveClock) (healthz.Checker, error) {
	opts.fillDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	ready := ReadyChecker(opts.CertDir, clk)
	if opts.Mode == ModeCertManager {
		return ready, nil
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the certificates scheme: %w", err)
	}
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}, Field: byName(opts.SecretName)},
	}
	if opts.MutatingWebhookName != "" {
		byObject[&admissionregistrationv1.MutatingWebhookConfiguration{}] = cache.ByObject{Field: byName(opts.MutatingWebhookName)}
	}
	if opts.ValidatingWebhookName != "" {
		byObject[&admissionregistrationv1.ValidatingWebhookConfiguration{}] = cache.ByObject{Field: byName(opts.ValidatingWebhookName)}
	}
	cl, err := cluster.New(mgr.GetConfig(), func(o *cluster.Options) {
		o.Scheme = scheme
		o.Cache.ByObject = byObject
		o.Logger = mgr.GetLogger().WithName("certs")
	})
	if err != nil {
		return nil, fmt.Errorf("creating the certificates cache: %w", err)
	}
	if err := mgr.Add(cl); err != nil {
		return nil, fmt.Errorf("adding the certificates cache: %w", err)
	}
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the certificates client: %w", err)
	}
	recorder := mgr.GetEventRecorder("shepherd-certs")
	// The authority reads the apiserver directly, never the cache: deciding
	// on a stale Secret could inject an outdated bundle. The cache only
	// tells it when to look.
	auth := &authority{
		reader: direct,
		writer: direct,
		opts:   opts,
		policy: opts.policy(),
		clk:    clk,
		event: func(obj client.Object, eventtype, reason, note string) {
			recorder.Eventf(obj, nil, eventtype, reason, "Reconcile", "%s", note)
		},
	}
	key := client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}
	files := &fileWriter{reader: cl.GetClient(), key: key, dir: opts.CertDir}

	if err := bootstrap(mgr.GetLogger().WithName("certs"), auth, files); err != nil {
		return nil, err
	}

	// Every event maps to the one Secret: there is one thing to reconcile.
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName(key)}}
	})
	// Several managers run in one test process (one per replica), so the
	// controller names cannot be unique process-wide.
	authCtrl, err := controller.New("certs-authority", mgr, controller.Options{
		Reconciler: auth, SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the CA controller: %w", err)
	}
	for obj := range byObject {
		if err := authCtrl.Watch(source.Kind(cl.GetCache(), obj, one)); err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	filesCtrl, err := controller.New("certs-files", mgr, controller.Options{
		Reconciler: files, SkipNameValidation: ptr.To(true), NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the certificate file writer: %w", err)
	}
	if err := filesCtrl.Watch(source.Kind(cl.GetCache(), client.Object(&corev1.Secret{}), one)); err != nil {
		return nil, fmt.Errorf("watching the certificate Secret: %w", err)
	}
	return ready, nil
}

// bootstrap runs one pass of the authority against the apiserver directly
// (the caches do not run before mgr starts) and writes the files. Another
// replica may be doing the same: a conflict means it wrote first, so the
// pass is repeated on what it wrote.
func bootstrap(log logr.Logger, auth *authority, files *fileWriter) error {
	ctx, cancel := context.WithTimeout(ctrl.LoggerInto(context.Background(), log), BootstrapTimeout)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		_, secret, err := auth.sync(ctx)
		if err == nil {
			if err := files.write(ctx, secret); err != nil {
				return fmt.Errorf("writing the serving certificate to %s: %w", files.dir, err)
			}
			log.Info("Serving certificate ready", "dir", files.dir, "secret", files.key.String())
			return nil
		}
		lastErr = err
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !errors.Is(err, errRetry) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("preparing the serving certificate: %w (last error: %w)", ctx.Err(), lastErr)
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return fmt.Errorf("preparing the serving certificate in Secret %s: %w", files.key, lastErr)
}
