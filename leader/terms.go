package leader

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
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

// Terms runs the leader's half of shepherd: in every term, what runs on
// the leader beside the reconcilers (AddLeaderOnly: the certificate
// authority, the background audit, the UPDATE matchCondition keeper),
// then the controllers the frameworks' activation asked for (Activate).
type Terms struct {
	main    manager.Manager   // the serving manager
	events  recorder.Provider // the Events the reconcilers write
	log     logr.Logger
	timeout time.Duration // --graceful-shutdown-timeout
	// syncTimeout bounds a term's wait for the serving cache, as
	// controller-runtime's CacheSyncTimeout bounds a controller's.
	syncTimeout time.Duration
	indexed     *indexSet

	mu         sync.Mutex
	leaderOnly []func(manager.Manager) error
	wanted     []Controller
	current    *term
}

// Controller is what a term sets up: a reconciler, by name.
type Controller struct {
	Name  string
	Setup func(manager.Manager) error
}

// term is one term's manager and its view of the shared cache.
type term struct {
	mgr    manager.Manager
	cache  *termCache
	cancel context.CancelFunc
}

// NewTerms returns the terms over main, the serving manager: each term's
// manager shares its cache, client and REST mapper, writes its Events
// through events, and stops within timeout.
func NewTerms(main manager.Manager, events recorder.Provider, timeout time.Duration) *Terms {
	return &Terms{
		main: main, events: events, timeout: timeout, syncTimeout: 2 * time.Minute,
		log: main.GetLogger().WithName("leader"), indexed: &indexSet{keys: map[string]bool{}},
	}
}

// AddLeaderOnly adds f to what every term sets up first, after those added
// before it. It is for serve's wiring, before the first term.
func (l *Terms) AddLeaderOnly(f func(manager.Manager) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaderOnly = append(l.leaderOnly, f)
}

// Activate is the frameworks' hook for controller c: it runs in the
// current term, if any, and in every later one. It never fails the
// watcher: a term that refuses c (one that is stopping, say) ends, and
// the next one sets c up.
func (l *Terms) Activate(c Controller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wanted = append(l.wanted, c)
	if l.current == nil {
		return
	}
	if err := c.Setup(l.current.mgr); err != nil {
		l.log.Error(err, "setting up a controller in the current term; ending the term, the next one sets it up", "controller", c.Name)
		l.current.cancel()
	}
}

// RunWithoutElection runs terms back to back until ctx ends
// (--leader-elect=false: this replica is the only one), a failed term
// followed by a pause.
func (l *Terms) RunWithoutElection(ctx context.Context, pause time.Duration) {
	for ctx.Err() == nil {
		if err := l.Run(ctx); err != nil && ctx.Err() == nil {
			l.log.Error(err, "the reconcilers failed; starting them again", "in", pause)
			sleepCtx(ctx, pause)
		}
	}
}

// Run runs one term until ctx ends or its manager fails, and returns once
// every reconciler of the term has stopped.
func (l *Terms) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The term reads the serving manager's cache. A term started before
	// that cache synced, when the serving manager then fails, would wait
	// for it until serve gives up (controller-runtime v0.25.2's runnable
	// group keeps looping once its context ends before every runnable is
	// ready; serve/lifecycle.go bounds it). So the term starts only once
	// the cache has synced, and not at all if ctx ends first. The wait is
	// bounded: an informer that never syncs (its CRD deleted before its
	// first list) fails the term with an error, as it failed the term's
	// controller before, instead of holding it silently.
	syncCtx, stop := context.WithTimeout(ctx, l.syncTimeout)
	defer stop()
	if !l.main.GetCache().WaitForCacheSync(syncCtx) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the serving manager's cache did not sync within %v", l.syncTimeout)
	}
	t, err := l.newTerm(cancel)
	if err != nil {
		return err
	}
	// Whatever happens, the term's event handlers leave the shared
	// informers with it.
	defer t.cache.release()
	l.mu.Lock()
	for _, f := range l.leaderOnly {
		if err := f(t.mgr); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	for _, c := range l.wanted {
		if err := c.Setup(t.mgr); err != nil {
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
func (l *Terms) newTerm(cancel context.CancelFunc) (*term, error) {
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
	return &term{mgr: &EventsFrom{Manager: m, Events: l.events}, cache: tc, cancel: cancel}, nil
}

// EventsFrom is a manager whose Events come from another's recorders.
type EventsFrom struct {
	manager.Manager
	Events recorder.Provider
}

// GetEventRecorder is Events' recorder of name.
func (m *EventsFrom) GetEventRecorder(name string) recorder.EventRecorder {
	return m.Events.GetEventRecorder(name)
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
