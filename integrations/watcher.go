package integrations

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// debounce is how long the watcher waits after a CRD change before acting:
// installing a framework creates several CRDs, each updated as it becomes
// NamesAccepted then Established, and that should be one decision, not ten.
const debounce = 300 * time.Millisecond

// mappingRetry is how soon a framework whose CRDs are established but not
// yet in the apiserver's discovery is looked at again: an informer started
// before discovery knows the kind fails instead of syncing.
const mappingRetry = time.Second

// ReadyzCheck is the name of the watcher's /readyz check.
const ReadyzCheck = "frameworks"

// Watcher watches the CustomResourceDefinitions of the frameworks' groups
// through the manager's cache, starts each framework (its OnActivate hooks)
// once Decide says so, and hands the established CRDs to subscribers. It
// runs on every replica, without leader election: the admission lookups it
// starts are every replica's; the controllers its hooks add to the manager
// still start on the leader only.
//
// A framework, once active, stays active until shepherd restarts:
// controller-runtime cannot remove a controller from a running manager.
//
// Permissions it needs (for RBAC generation).
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
type Watcher struct {
	modes     map[string]Mode
	reader    client.Reader
	mapper    meta.RESTMapper
	hasSynced func() bool

	// kick asks the run loop to look again; buffered, so a pending look
	// absorbs any number of kicks.
	kick  chan struct{}
	ready atomic.Bool

	mu     sync.Mutex
	active map[string]bool
	served map[string]bool // last decision's Served, to log changes only
	subs   []func(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition)
	hooks  []*hook
	// delivered fingerprints the CRDs subscribers last got, so a look that
	// changed nothing does not call them again; owed is set until the first
	// delivery, and by a new subscriber.
	delivered string
	owed      bool
}

// hook runs fn once every framework in needs is active.
type hook struct {
	needs []string
	fn    func(ctx context.Context) error
	done  bool
}

// NewWatcher returns a watcher for modes (frameworks absent from it are
// auto) and registers it with mgr: as a runnable, with the CRD informer on
// the manager's cache (so the cache sync waits for it), and as the /readyz
// check "frameworks", ready once the CRDs have been listed and acted on —
// an absent framework never holds readiness back.
func NewWatcher(mgr manager.Manager, modes map[string]Mode) (*Watcher, error) {
	for name, m := range modes {
		if _, ok := Lookup(name); !ok {
			return nil, fmt.Errorf("unknown framework %q", name)
		}
		if !slices.Contains(Modes, m) {
			return nil, fmt.Errorf("framework %s: invalid mode %q: want auto, on or off", name, m)
		}
	}
	inf, err := mgr.GetCache().GetInformer(context.Background(), &apiextensionsv1.CustomResourceDefinition{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("watching CustomResourceDefinitions: %w", err)
	}
	w := newWatcher(mgr.GetCache(), mgr.GetRESTMapper(), modes)
	onChange := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			if _, ours := Of(crd.Spec.Group); !ours {
				return
			}
		}
		w.trigger()
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
		DeleteFunc: onChange,
	})
	if err != nil {
		return nil, fmt.Errorf("watching CustomResourceDefinitions: %w", err)
	}
	w.hasSynced = reg.HasSynced
	for _, f := range Frameworks {
		setActiveMetric(f.Name, false)
	}
	if err := mgr.Add(w); err != nil {
		return nil, fmt.Errorf("adding the framework watcher: %w", err)
	}
	if err := mgr.AddReadyzCheck(ReadyzCheck, w.ReadyChecker); err != nil {
		return nil, fmt.Errorf("adding readiness check %s: %w", ReadyzCheck, err)
	}
	return w, nil
}

func newWatcher(reader client.Reader, mapper meta.RESTMapper, modes map[string]Mode) *Watcher {
	return &Watcher{
		modes:  maps.Clone(modes),
		reader: reader,
		mapper: mapper,
		kick:   make(chan struct{}, 1),
		active: map[string]bool{},
		served: map[string]bool{},
		owed:   true,
	}
}

// Subscribe calls fn after the initial sync and after every change to the
// established CRDs of the frameworks' groups (debounced), with deep copies
// of them sorted by name. fn runs on the watcher's goroutine: it should not
// block for long. Call it before the manager starts; a later subscriber
// gets the current CRDs at the next look.
func (w *Watcher) Subscribe(fn func(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition)) {
	w.mu.Lock()
	w.subs = append(w.subs, fn)
	w.owed = true // every subscriber, the new one included, gets the current set
	w.mu.Unlock()
	if w.ready.Load() {
		w.trigger()
	}
}

// OnActivate calls fn once, when framework name becomes active — where its
// reconcilers and lookup informers are registered. An error from fn stops
// the watcher, and with it the manager: a half-started framework would
// silently not do its job.
func (w *Watcher) OnActivate(name string, fn func(ctx context.Context) error) {
	w.OnActivateAll([]string{name}, fn)
}

// OnActivateAll calls fn once, when every framework in names is active: for
// a controller that watches the kinds of several frameworks.
func (w *Watcher) OnActivateAll(names []string, fn func(ctx context.Context) error) {
	for _, n := range names {
		if _, ok := Lookup(n); !ok {
			panic(fmt.Sprintf("integrations: OnActivate of unknown framework %q", n))
		}
	}
	w.mu.Lock()
	w.hooks = append(w.hooks, &hook{needs: names, fn: fn})
	w.mu.Unlock()
	if w.ready.Load() {
		w.trigger()
	}
}

// Active reports whether framework name has been started.
func (w *Watcher) Active(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active[name]
}

// ReadyChecker fails until the CRDs have been listed and acted on once.
func (w *Watcher) ReadyChecker(_ *http.Request) error {
	if !w.ready.Load() {
		return errors.New("the frameworks' CustomResourceDefinitions have not been listed yet")
	}
	return nil
}

// NeedLeaderElection is false: every replica needs the lookups of the
// active frameworks.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start waits for the CRD informer to sync, decides, then decides again
// after every change until ctx ends. It fails when a framework whose mode is
// on is not served at start, or when an activation hook fails.
func (w *Watcher) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("frameworks")
	ctx = ctrl.LoggerInto(ctx, log)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return w.hasSynced(), nil
	}); err != nil {
		return nil // ctx ended before the sync
	}
	if err := w.look(ctx, true); err != nil {
		return err
	}
	w.ready.Store(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(debounce):
		}
		select { // this look covers the kicks of the debounce window
		case <-w.kick:
		default:
		}
		if err := w.look(ctx, false); err != nil {
			return err
		}
	}
}

func (w *Watcher) trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// look lists the frameworks' CRDs, activates what Decide says should run,
// and notifies subscribers of a changed set.
func (w *Watcher) look(ctx context.Context, initial bool) error {
	log := ctrl.LoggerFrom(ctx)
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := w.reader.List(ctx, &list); err != nil {
		return fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	crds := FrameworkCRDs(list.Items)

	var required, activate []string
	retry := false
	for _, d := range Decide(w.modes, crds) {
		w.logChange(ctx, d)
		if d.Mode == ModeOn && !d.Served && initial {
			required = append(required, fmt.Sprintf("framework %s is on, but the cluster does not serve its CRDs %s", d.Framework, strings.Join(d.Missing, ", ")))
			continue
		}
		if !d.Start || w.Active(d.Framework) {
			continue
		}
		if err := w.mapped(d.Framework); err != nil {
			log.V(1).Info("framework's CRDs are established but not yet discovered; looking again", "framework", d.Framework, "reason", err.Error())
			retry = true
			continue
		}
		activate = append(activate, d.Framework)
	}
	if len(required) > 0 {
		return fmt.Errorf("%s: install them, or set the framework's mode to auto", strings.Join(required, "; "))
	}
	if retry {
		time.AfterFunc(mappingRetry, w.trigger)
	}

	w.mu.Lock()
	for _, name := range activate {
		w.active[name] = true
		setActiveMetric(name, true)
		log.Info("starting framework", "framework", name)
	}
	var due []*hook
	for _, h := range w.hooks {
		if !h.done && !slices.ContainsFunc(h.needs, func(n string) bool { return !w.active[n] }) {
			h.done = true
			due = append(due, h)
		}
	}
	subs := slices.Clone(w.subs)
	fingerprint := fingerprintOf(crds)
	changed := w.owed || fingerprint != w.delivered
	w.delivered, w.owed = fingerprint, false
	w.mu.Unlock()

	for _, h := range due {
		if err := h.fn(ctx); err != nil {
			return fmt.Errorf("starting framework %s: %w", strings.Join(h.needs, "+"), err)
		}
	}
	if changed {
		for _, fn := range subs {
			copies := make([]*apiextensionsv1.CustomResourceDefinition, len(crds))
			for i, c := range crds {
				copies[i] = c.DeepCopy()
			}
			fn(ctx, copies)
		}
	}
	return nil
}

// logChange logs a framework's decision the first time and whenever whether
// the cluster serves it changes.
func (w *Watcher) logChange(ctx context.Context, d Decision) {
	w.mu.Lock()
	was, seen := w.served[d.Framework]
	w.served[d.Framework] = d.Served
	active := w.active[d.Framework]
	w.mu.Unlock()
	if seen && was == d.Served {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithValues("framework", d.Framework, "mode", d.Mode)
	switch {
	case d.Served && d.Mode == ModeOff:
		log.Info("framework is off: not starting it although its CRDs are established")
	case d.Served:
		log.Info("framework's CRDs are established")
	case active:
		log.Info("framework's CRDs are no longer established; its reconcilers keep running until shepherd restarts", "missing", d.Missing)
	case d.Mode == ModeOff:
		log.Info("framework is off", "missing", d.Missing)
	default:
		log.Info("framework's CRDs are not established: skipping it until they are", "missing", d.Missing)
	}
}

// mapped checks that the manager's REST mapper knows every kind of the
// framework at its version (re-reading discovery if it does not yet).
func (w *Watcher) mapped(name string) error {
	f, _ := Lookup(name)
	for _, kind := range f.Kinds {
		if _, err := w.mapper.RESTMapping(schema.GroupKind{Group: f.Group, Kind: kind}, f.Version); err != nil {
			return fmt.Errorf("mapping %s.%s/%s: %w", kind, f.Group, f.Version, err)
		}
	}
	return nil
}

// fingerprintOf identifies a set of CRDs by name and resourceVersion.
func fingerprintOf(crds []*apiextensionsv1.CustomResourceDefinition) string {
	var b strings.Builder
	for _, c := range crds {
		b.WriteString(c.Name)
		b.WriteByte('@')
		b.WriteString(c.ResourceVersion)
		b.WriteByte(' ')
	}
	return b.String()
}

// FrameworkCRDs are the established CRDs of the frameworks' groups among
// items, by name.
func FrameworkCRDs(items []apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinition {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for i := range items {
		if _, ok := Of(items[i].Spec.Group); ok && Established(&items[i]) {
			crds = append(crds, &items[i])
		}
	}
	slices.SortFunc(crds, func(a, b *apiextensionsv1.CustomResourceDefinition) int { return strings.Compare(a.Name, b.Name) })
	return crds
}

// CacheByObject is the manager cache's setting for CustomResourceDefinitions:
// it keeps only the name and group of the CRDs of other groups, so a
// cluster's hundreds of unrelated CRDs (and their megabytes of schemas) are
// not held in shepherd's memory just to find the few it needs.
func CacheByObject() cache.ByObject {
	return cache.ByObject{Transform: func(obj any) (any, error) {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return obj, nil
		}
		crd.ManagedFields = nil
		if _, ours := Of(crd.Spec.Group); ours {
			return crd, nil
		}
		return &apiextensionsv1.CustomResourceDefinition{
			TypeMeta: crd.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Name: crd.Name, UID: crd.UID, ResourceVersion: crd.ResourceVersion, Generation: crd.Generation,
				CreationTimestamp: crd.CreationTimestamp, DeletionTimestamp: crd.DeletionTimestamp,
			},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: crd.Spec.Group, Names: crd.Spec.Names, Scope: crd.Spec.Scope},
		}, nil
	}}
}
