package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crleaderelection "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/reconcile"
)

// The reconcilers (and, in self-signed mode, the certificate authority)
// run on the leader only, each term of leadership in a manager of its own
// (a "term"), while the webhook server, the caches, the Events and the
// probes run in the serving manager for the life of the process.
// controller-runtime's manager, given the Lease, exits when it loses it —
// an apiserver outage longer than the renew deadline is enough — and takes
// admission down with it; a manager cannot be started twice, so the
// leader's half is a new manager each term. It shares the serving
// manager's cache, client, REST mapper and Events: a term costs no second
// copy of the cluster's objects and no re-list.

// leaderTerms runs the leader's half of shepherd: the controllers the
// frameworks' activation asked for, in every term.
type leaderTerms struct {
	main    manager.Manager   // the serving manager
	events  recorder.Provider // the Events the reconcilers write
	opts    reconcile.Options
	log     logr.Logger
	timeout time.Duration // --graceful-shutdown-timeout
	// leaderOnly sets up, in each term, what runs on the leader beside
	// the reconcilers (the certificate authority).
	leaderOnly func(manager.Manager) error
	indexed    *indexSet

	mu      sync.Mutex
	wanted  []reconcile.Controller
	current *term
}

// term is one term's manager and its view of the shared cache.
type term struct {
	mgr    manager.Manager
	cache  *termCache
	cancel context.CancelFunc
}

func newLeaderTerms(main manager.Manager, events recorder.Provider, opts reconcile.Options, timeout time.Duration, leaderOnly func(manager.Manager) error) *leaderTerms {
	return &leaderTerms{
		main: main, events: events, opts: opts, timeout: timeout, leaderOnly: leaderOnly,
		log: main.GetLogger().WithName("leader"), indexed: &indexSet{keys: map[string]bool{}},
	}
}

// activate is the frameworks' hook for controller c: it runs in the
// current term, if any, and in every later one. It never fails the
// watcher: a term that refuses c (one that is stopping, say) ends, and
// the next one sets c up.
func (l *leaderTerms) activate(c reconcile.Controller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wanted = append(l.wanted, c)
	if l.current == nil {
		return
	}
	if err := c.Setup(l.current.mgr, l.opts); err != nil {
		l.log.Error(err, "setting up a controller in the current term; ending the term, the next one sets it up", "controller", c.Name)
		l.current.cancel()
	}
}

// runWithoutElection runs terms back to back until ctx ends
// (--leader-elect=false: this replica is the only one), a failed term
// followed by a pause.
func (l *leaderTerms) runWithoutElection(ctx context.Context, pause time.Duration) {
	for ctx.Err() == nil {
		if err := l.run(ctx); err != nil && ctx.Err() == nil {
			l.log.Error(err, "the reconcilers failed; starting them again", "in", pause)
			sleepCtx(ctx, pause)
		}
	}
}

// run runs one term until ctx ends or its manager fails, and returns once
// every reconciler of the term has stopped.
func (l *leaderTerms) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, err := l.newTerm(cancel)
	if err != nil {
		return err
	}
	// Whatever happens, the term's event handlers leave the shared
	// informers with it.
	defer t.cache.release()
	if l.leaderOnly != nil {
		if err := l.leaderOnly(t.mgr); err != nil {
			return err
		}
	}
	l.mu.Lock()
	for _, c := range l.wanted {
		if err := c.Setup(t.mgr, l.opts); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	l.current = t
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.current = nil
		l.mu.Unlock()
	}()
	return t.mgr.Start(ctx)
}

// newTerm is a manager for one term over the serving manager's cache,
// client and REST mapper, with no server of its own.
func (l *leaderTerms) newTerm(cancel context.CancelFunc) (*term, error) {
	tc := &termCache{Cache: l.main.GetCache(), indexed: l.indexed, own: map[string]bool{}}
	m, err := ctrl.NewManager(l.main.GetConfig(), manager.Options{
		Scheme:                  l.main.GetScheme(),
		Logger:                  l.log,
		MapperProvider:          func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return l.main.GetRESTMapper(), nil },
		NewCache:                func(*rest.Config, cache.Options) (cache.Cache, error) { return tc, nil },
		NewClient:               func(*rest.Config, client.Options) (client.Client, error) { return l.main.GetClient(), nil },
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: &l.timeout,
		// Every term creates the same controllers again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the reconcilers' manager: %w", err)
	}
	return &term{mgr: &eventsFrom{Manager: m, events: l.events}, cache: tc, cancel: cancel}, nil
}

// eventsFrom is a manager whose Events come from another's recorders.
type eventsFrom struct {
	manager.Manager
	events recorder.Provider
}

func (m *eventsFrom) GetEventRecorder(name string) recorder.EventRecorder {
	return m.events.GetEventRecorder(name)
}

// indexSet is the field indexes registered on the shared cache, by object
// type and field.
type indexSet struct {
	mu   sync.Mutex
	keys map[string]bool
}

// termCache is the serving manager's cache as a term sees it. The serving
// manager starts and syncs it (Start only waits). A field index is
// registered once for the life of the process: every term's controllers
// register the same ones again, and an informer refuses a second indexer
// of a name. The event handlers a term's controllers add are removed when
// the term ends, so terms do not pile them up on informers that outlive
// them.
type termCache struct {
	cache.Cache
	indexed *indexSet
	own     map[string]bool // the indexes this term registered (under indexed.mu)

	mu       sync.Mutex
	handlers []handlerReg
	released bool
}

type handlerReg struct {
	informer cache.Informer
	reg      toolscache.ResourceEventHandlerRegistration
}

func (c *termCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (c *termCache) IndexField(ctx context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	key := fmt.Sprintf("%T/%s", obj, field)
	c.indexed.mu.Lock()
	defer c.indexed.mu.Unlock()
	// Registered by an earlier term: the same controller code, the same
	// index. Twice in one term is a mistake the cache reports as before.
	if c.indexed.keys[key] && !c.own[key] {
		c.own[key] = true
		return nil
	}
	if err := c.Cache.IndexField(ctx, obj, field, fn); err != nil {
		return err
	}
	c.indexed.keys[key], c.own[key] = true, true
	return nil
}

func (c *termCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: inf, c: c}, nil
}

func (c *termCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return &termInformer{Informer: inf, c: c}, nil
}

// track records a handler of the term; one added after the term ended (a
// source still starting) is removed at once.
func (c *termCache) track(inf cache.Informer, reg toolscache.ResourceEventHandlerRegistration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		_ = inf.RemoveEventHandler(reg)
		return
	}
	c.handlers = append(c.handlers, handlerReg{informer: inf, reg: reg})
}

// release removes the term's event handlers.
func (c *termCache) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	for _, h := range c.handlers {
		_ = h.informer.RemoveEventHandler(h.reg)
	}
	c.handlers = nil
}

// termInformer is a shared informer whose handlers belong to a term.
type termInformer struct {
	cache.Informer
	c *termCache
}

func (i *termInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandler(h)
	if err == nil {
		i.c.track(i.Informer, reg)
	}
	return reg, err
}

func (i *termInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithResyncPeriod(h, resync)
	if err == nil {
		i.c.track(i.Informer, reg)
	}
	return reg, err
}

func (i *termInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithOptions(h, opts)
	if err == nil {
		i.c.track(i.Informer, reg)
	}
	return reg, err
}

// elector campaigns for the Lease and runs a term while this replica holds
// it, again and again until its context ends: losing the Lease (an
// apiserver outage longer than the renew deadline, say) stops the
// reconcilers and nothing else, and the replica campaigns again.
type elector struct {
	terms *leaderTerms
	lock  resourcelock.Interface
	// leases and leaseName read and delete the Lease directly
	// (takeExpired); leases is nil when the lock is not a Lease.
	leases    leaseClient
	leaseName string
	// cannotDelete is set once the apiserver refused a delete (RBAC).
	cannotDelete atomic.Bool

	leaseDuration, renewDeadline, retryPeriod time.Duration
	log                                       logr.Logger
}

// leaseClient is the part of the Leases client takeExpired uses.
type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Permissions of leader election (for RBAC generation; test/rbac checks
// the shipped RBAC grants them): one Lease, --leader-election-id; create
// cannot be limited by name; delete takes an expired Lease (takeExpired).
// Its Events go through the core API.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=shepherd-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update;patch;delete,namespace=shepherd-system,resourceNames=shepherd.shepherd.dev
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch

// leaseNamespace is the leader-election Lease's namespace:
// --leader-election-namespace if set, else shepherd's own as the
// certificate code defaults it (api.OwnNamespace: $POD_NAMESPACE, else the
// service account's, else shepherd-system). controller-runtime's own
// default reads only the service account's file, so out of a pod it
// ignored $POD_NAMESPACE and failed.
func leaseNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	return api.OwnNamespace()
}

// newElector builds the Lease lock as controller-runtime's manager would
// (the same identity scheme and client timeout), in leaseNamespace.
func newElector(cfg *rest.Config, events recorder.Provider, terms *leaderTerms, o *serveOptions) (*elector, error) {
	lock, err := crleaderelection.NewResourceLock(cfg, events, crleaderelection.Options{
		LeaderElection:          true,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: leaseNamespace(o.leaderElectionNamespace),
		RenewDeadline:           o.renewDeadline,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election (--leader-election-namespace, --leader-election-id): %w", err)
	}
	e := &elector{
		terms: terms, lock: lock, log: terms.log,
		leaseDuration: o.leaseDuration, renewDeadline: o.renewDeadline, retryPeriod: o.retryPeriod,
	}
	if ll, ok := lock.(*resourcelock.LeaseLock); ok {
		e.leases, e.leaseName = ll.Client.Leases(ll.LeaseMeta.Namespace), ll.LeaseMeta.Name
	}
	return e, nil
}

// run campaigns until ctx ends; it returns once the last term has stopped
// and the Lease, if held, has been released.
func (e *elector) run(ctx context.Context) {
	for ctx.Err() == nil {
		e.campaign(ctx)
	}
}

// campaign waits for the Lease, runs a term while holding it, and returns
// when the term ends: the Lease lost, ctx ended, or the term failed.
func (e *elector) campaign(ctx context.Context) {
	// The elector renews until told to stop, and it is told only once the
	// term has stopped: this replica's reconcilers never run without the
	// Lease renewed, and the Lease is never released while they run.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	takeCtx, stopTaking := context.WithCancel(ctx)
	defer stopTaking()
	// leading is set when a term starts; abandoned when the campaign ended
	// first (the callback may still be about to run: it then does nothing).
	var mu sync.Mutex
	var leading, abandoned bool
	termDone := make(chan struct{})
	var termErr error

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          e.lock,
		LeaseDuration: e.leaseDuration,
		RenewDeadline: e.renewDeadline,
		RetryPeriod:   e.retryPeriod,
		Name:          e.lock.Describe(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				mu.Lock()
				if abandoned {
					mu.Unlock()
					return
				}
				leading = true
				mu.Unlock()
				defer close(termDone)
				stopTaking()
				termCtx, cancel := context.WithCancel(leCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel) // shutdown ends the term
				defer stop()
				e.log.Info("leading: starting the reconcilers", "lease", e.lock.Describe(), "identity", e.lock.Identity())
				termErr = e.terms.run(termCtx)
				stopElecting()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil { // the timings are checked at start; not expected
		e.log.Error(err, "configuring leader election")
		sleepCtx(ctx, e.leaseDuration)
		return
	}
	// Not leading yet: shutdown ends the campaign at once. (Leading: the
	// term ends first, then the campaign, above.)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			stopElecting()
		}
	})
	defer stop()
	if e.leases != nil {
		e.takeExpired(takeCtx)
		go wait.UntilWithContext(takeCtx, e.takeExpired, e.retryPeriod)
	}
	le.Run(electCtx)
	mu.Lock()
	abandoned = !leading
	mu.Unlock()
	if abandoned {
		if ctx.Err() != nil {
			e.release(ctx) // in case the Lease was acquired as the campaign ended
		}
		return
	}
	<-termDone
	switch {
	case ctx.Err() != nil:
		e.log.Info("shutting down: reconcilers stopped; releasing the Lease")
		e.release(ctx)
	case termErr != nil:
		// Let another replica lead while this one backs off.
		e.log.Error(termErr, "the reconcilers failed; releasing the Lease and campaigning again after a lease duration")
		e.release(ctx)
		sleepCtx(ctx, e.leaseDuration)
	default:
		e.log.Info("lost the Lease: reconcilers stopped; campaigning again", "lease", e.lock.Describe())
	}
}

// release gives the Lease up if this replica still holds it, as client-go's
// ReleaseOnCancel does, but only after the term's reconcilers have
// stopped. The update carries the resourceVersion just read: it fails,
// harmlessly, if another replica took the Lease meanwhile.
func (e *elector) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.renewDeadline)
	defer cancel()
	rec, _, err := e.lock.Get(rctx)
	if err != nil || rec.HolderIdentity != e.lock.Identity() {
		return
	}
	now := metav1.NewTime(time.Now())
	if err := e.lock.Update(rctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	}); err != nil {
		e.log.Info("could not release the Lease; it expires on its own", "error", err.Error())
	}
}

// takeExpired deletes the Lease when its holder's last renewal is more
// than its duration ago, so that the elector, finding no Lease, creates it
// at once. client-go's elector instead waits a full lease duration from
// the moment it first sees a Lease, whatever its renewTime: a replica
// (re)started after its predecessor died, or every replica after an
// apiserver outage, would wait that long with nobody enforcing.
//
// It is safe because the delete carries the resourceVersion (and UID) that
// was judged expired: if the holder renewed in between, the apiserver
// refuses it, and no live leader loses its Lease. A holder that has not
// renewed for a lease duration stopped leading a while ago — it gives up
// after the renew deadline, shorter than the duration. The one assumption
// is that the replicas' clocks agree to within a lease duration minus a
// retry period (13 s by default), as they do on NTP-synchronised nodes: the
// renewTime compared is the holder's clock, the now is this replica's.
func (e *elector) takeExpired(ctx context.Context) {
	if e.cannotDelete.Load() {
		return
	}
	taken, err := deleteExpiredLease(ctx, e.leases, e.leaseName, e.lock.Identity(), time.Now())
	switch {
	case apierrors.IsForbidden(err):
		// The Role lacks delete on the Lease: wait for expiry as
		// client-go's elector does.
		e.log.Info("cannot delete an expired Lease (RBAC: grant delete on it); waiting for it to expire instead", "lease", e.leaseName, "error", err.Error())
		e.cannotDelete.Store(true)
	case err != nil:
		e.log.V(1).Info("checking the Lease for expiry", "error", err.Error())
	case taken != "":
		e.log.Info("deleted the Lease its holder stopped renewing; taking it", "lease", e.leaseName, "previousHolder", taken)
	}
}

// deleteExpiredLease deletes Lease name if it is held, by someone other
// than identity, and its renewTime plus leaseDurationSeconds is before
// now; it returns the previous holder when it did. A Lease released
// (no holder) or held by identity needs no delete: the elector takes it
// at once.
func deleteExpiredLease(ctx context.Context, leases leaseClient, name, identity string, now time.Time) (string, error) {
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !leaseExpired(l, identity, now) {
		return "", nil
	}
	rv, uid := l.ResourceVersion, l.UID
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv, UID: &uid}})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return "", nil // renewed, taken or deleted meanwhile
	}
	if err != nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// leaseExpired: held by someone other than identity, and not renewed for
// longer than its duration.
func leaseExpired(l *coordinationv1.Lease, identity string, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || *s.HolderIdentity == identity ||
		s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
