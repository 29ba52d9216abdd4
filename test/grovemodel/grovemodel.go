// Package grovemodel is a behaviour model of the Grove operator at
// github.com/ai-dynamo/grove commit fcc3b3bbbc5e6a2a797cd080bdbc6983b1ccec24
// (the commit api/grove/v1alpha1 mirrors): a test double that does,
// in the test process against a test control plane (test/cluster), what the
// real operator does to the objects shepherd shares with it. Grove is not on
// the Go module proxy, so tests cannot run the real one. Each rule names the
// Grove file (under operator/) it was read from.
//
// Modelled: the PodCliqueSet defaulting webhook; the PodCliqueSet controller
// (finalizer, standalone PodCliques rebuilt from the template on every
// reconcile, PodCliqueScalingGroups, PodCliques of replicas scaled away
// deleted, gang termination of a replica); the PodCliqueScalingGroup
// controller (its PodCliques created, and rebuilt only under updateStrategy
// OnDelete); the PodClique controller (pods created up to replicas and so
// recreated, excess pods deleted, the PodGang scheduling gate lifted, status
// and the PodCliqueScheduled and MinAvailableBreached conditions); every
// finalizer removed on deletion; the watches and predicates that decide when
// each controller reconciles.
//
// Not modelled: the validating and authorization webhooks; PodGangs (not
// served here: see podGangDelay; the gate of a scaled gang's pod does not
// wait for the base gang to be scheduled); rolling updates and generation
// hashes; the status of PodCliqueSets and PodCliqueScalingGroups, hence no
// breach of a scaling group and no gang termination of a group replica or
// because of one; scale-in of a scaling group; startup ordering (startsAfter
// is left empty, as for the default CliqueStartupTypeAnyOrder; no init
// container); the GROVE_* environment; Services, RBAC, HPAs, ResourceClaims,
// MNNVL, topology; lastErrors; Events. Every read goes to the apiserver, not
// an informer cache, so the model needs no expectations. Condition messages
// are the model's own words; types and reasons are Grove's.
//
// The model runs as user grove-operator (cluster.KubeconfigAs) with user
// agent grove-operator, so its writes show under that user in an audit log
// and under field manager grove-operator in managedFields, as the real
// binary's do (operator/Makefile builds grove-operator; its client sets no
// field owner, so the apiserver takes the manager from the user agent).
// Nothing runs as kubelet or scheduler, and the model never writes a pod's
// status: pods stay Pending until a test writes it.
package grovemodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// Commit is the Grove commit the model follows.
const Commit = "fcc3b3bbbc5e6a2a797cd080bdbc6983b1ccec24"

// User is the model's user, user agent and field manager (Grove's OperatorName).
const User = "grove-operator"

// Condition types and reasons (api/common/constants/constants.go).
const (
	CondMinAvailableBreached                 = "MinAvailableBreached"
	ReasonScheduledReplicasBelowMinAvailable = "ScheduledReplicasBelowMinAvailable"
	ReasonInsufficientReadyPods              = "InsufficientReadyPods"
	ReasonSufficientReadyPods                = "SufficientReadyPods"
	condPodCliqueScheduled                   = "PodCliqueScheduled"
)

// Labels, finalizers, annotations (api/common/labels.go, constants.go) and
// the pod scheduling gate (controller/podclique/components/pod/pod.go).
const (
	labelManagedBy        = "app.kubernetes.io/managed-by"
	labelPartOf           = "app.kubernetes.io/part-of"
	labelName             = "app.kubernetes.io/name"
	labelComponent        = "app.kubernetes.io/component"
	labelPodClique        = "grove.io/podclique"
	labelPodGang          = "grove.io/podgang"
	labelBasePodGang      = "grove.io/base-podgang"
	labelReplicaIndex     = "grove.io/podcliqueset-replica-index"
	labelPCSG             = "grove.io/podcliquescalinggroup"
	labelPCSGReplicaIndex = "grove.io/podcliquescalinggroup-replica-index"
	labelPodIndex         = "grove.io/podclique-pod-index"
	labelTemplateHash     = "grove.io/pod-template-hash"
	finalizerPCS          = "grove.io/podcliqueset.grove.io"
	finalizerPCLQ         = "grove.io/podclique.grove.io"
	finalizerPCSG         = "grove.io/podcliquescalinggroup.grove.io"
	annotationTrigger     = "grove.io/reconcile-trigger"
	annotationTopology    = "grove.io/topology-name"
	podGangGate           = "grove.io/podgang-pending-creation"
)

// DefaultRetryInterval is Grove's ComponentSyncRetryInterval
// (internal/constants/constants.go): the requeue of a reconcile that waits.
const DefaultRetryInterval = 5 * time.Second

// podGangDelay stands in for the PodGang: a PodClique that made pods is
// reconciled again after it, and then lifts their gates, as Grove does when
// its next PodCliqueSet reconcile has put them in an initialized PodGang
// (controller/podcliqueset/components/podgang/syncflow.go), which wakes the
// PodClique controller.
const podGangDelay = 200 * time.Millisecond

// InitialScheduleGrace is Grove's InitialScheduleGrace
// (controller/common/component/utils/podclique.go).
const InitialScheduleGrace = 5 * time.Second

var groveGV = schema.GroupVersion{Group: "grove.io", Version: "v1alpha1"}

// Options configures the model.
type Options struct {
	// SkipWebhook leaves the defaulting webhook out; PodCliqueSets then
	// need terminationDelay and every clique minAvailable, as under Grove.
	SkipWebhook bool
	// RetryInterval replaces DefaultRetryInterval.
	RetryInterval time.Duration
}

// Operator is a running model.
type Operator struct {
	// Client is the model's own client, as User.
	Client client.Client

	admin  client.Client
	dir    string
	server *http.Server
	cancel context.CancelFunc
	done   chan error
}

// model is what the reconcilers share.
type model struct {
	c     client.Client
	retry time.Duration
}

// Start registers the webhook (unless opts.SkipWebhook) and runs the three
// controllers until Stop.
func Start(ctx context.Context, c *cluster.Cluster, opts Options) (o *Operator, err error) {
	o = &Operator{admin: c.Client}
	defer func() {
		if err != nil {
			err = errors.Join(err, o.Stop())
		}
	}()
	if o.dir, err = os.MkdirTemp("", "grovemodel-"); err != nil {
		return nil, err
	}
	_, userCfg, err := c.KubeconfigAs(o.dir, User)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(userCfg)
	cfg.UserAgent, cfg.QPS, cfg.Burst = User, 500, 1000
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if o.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating the client of %s: %w", User, err)
	}
	if !opts.SkipWebhook {
		if err := o.serveWebhook(ctx); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, HealthProbeBindAddress: "0",
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	m := &model{c: o.Client, retry: cmp.Or(opts.RetryInterval, DefaultRetryInterval)}
	// The watches and predicates of each controller's register.go.
	if err := errors.Join(
		ctrl.NewControllerManagedBy(mgr).Named("podcliqueset-controller").
			For(newObj("PodCliqueSet"), pcsPredicates()).
			Watches(newObj("PodClique"), mapByLabel(labelPartOf), pclqToPCSPredicates()).
			Watches(newObj("PodCliqueScalingGroup"), mapByLabel(labelPartOf), pcsgToPCSPredicates()).
			Complete(quiet(m.reconcilePCS)),
		ctrl.NewControllerManagedBy(mgr).Named("podcliquescalinggroup-controller").
			For(newObj("PodCliqueScalingGroup"), pcsgPredicates()).
			Watches(newObj("PodClique"), mapByLabel(labelPCSG), pclqToPCSGPredicates()).
			Complete(quiet(m.reconcilePCSG)),
		ctrl.NewControllerManagedBy(mgr).Named("podclique-controller").
			For(newObj("PodClique"), pclqPredicates()).
			Owns(&corev1.Pod{}, podPredicates()).
			Complete(quiet(m.reconcilePCLQ)),
	); err != nil {
		return nil, fmt.Errorf("setting the controllers up: %w", err)
	}
	// Informers made before the start are synced by WaitForCacheSync below,
	// so a Stop right after Start finds no watch still starting.
	for _, obj := range []client.Object{newObj("PodCliqueSet"), newObj("PodCliqueScalingGroup"), newObj("PodClique"), &corev1.Pod{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	o.cancel, o.done = cancel, make(chan error, 1)
	go func() { o.done <- mgr.Start(mctx) }()
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return nil, errors.New("the model's informers did not sync")
	}
	return o, nil
}

// Stop stops the controllers and the webhook and unregisters the webhook.
func (o *Operator) Stop() error {
	var errs []error
	if o.cancel != nil {
		o.cancel()
		errs, o.cancel = append(errs, <-o.done), nil
	}
	if o.server != nil {
		errs, o.server = append(errs, o.unregisterWebhook(), o.server.Close()), nil
	}
	if o.dir != "" {
		errs, o.dir = append(errs, os.RemoveAll(o.dir)), ""
	}
	return errors.Join(errs...)
}

// quiet drops the errors of a reconcile that Stop cut short.
func quiet(f reconcile.Func) reconcile.Func {
	return func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := f(ctx, req)
		if ctx.Err() != nil {
			return reconcile.Result{}, nil
		}
		return res, err
	}
}

// newObj is an empty Grove object of kind.
func newObj(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(groveGV.WithKind(kind))
	return u
}

// named is a Grove object with a namespace and name only.
func named(kind, ns, name string) *unstructured.Unstructured {
	u := newObj(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// newList is an empty list of Grove objects of kind.
func newList(kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(groveGV.WithKind(kind + "List"))
	return l
}
