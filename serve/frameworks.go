package serve

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/leader"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// lookupSyncTimeout bounds the wait for an activated framework's lookup
// informers to sync: controller-runtime's default for a controller's caches.
const lookupSyncTimeout = 2 * time.Minute

// frameworkModes are the --framework-<name> flags, by framework name.
type frameworkModes map[string]*integrations.Mode

func defaultFrameworkModes() frameworkModes {
	m := frameworkModes{}
	for _, f := range integrations.Frameworks {
		mode := integrations.ModeAuto
		m[f.Name] = &mode
	}
	return m
}

func (m frameworkModes) addFlags(fs *pflag.FlagSet) {
	for _, f := range integrations.Frameworks {
		fs.Var(m[f.Name], "framework-"+f.Name, fmt.Sprintf(
			"When shepherd starts its %s integration — reconcilers and admission lookups — which needs the CRDs of %s in %s: "+
				"auto (once the cluster serves them all, at start or later, without a restart), "+
				"on (they are required: serve exits at start naming the missing ones), off (never).",
			f.Name, strings.Join(f.Kinds, ", "), f.Group))
	}
}

func (m frameworkModes) modes() map[string]integrations.Mode {
	out := make(map[string]integrations.Mode, len(m))
	for name, mode := range m {
		out[name] = *mode
	}
	return out
}

// setupFrameworks starts the detection of the frameworks' CRDs and
// registers what each framework starts once active: the informers of its
// admission lookups and, unless reconcilers are disabled, every controller
// whose frameworks are all active (in the leader's terms).
func setupFrameworks(ctx context.Context, mgr ctrl.Manager, o *Options, terms *leader.Terms, opts integrations.ControllerOptions) (*integrations.Watcher, error) {
	w, err := integrations.NewWatcher(mgr, o.frameworks.modes())
	if err != nil {
		return nil, err
	}
	lookups := integrations.LookupObjects()
	if err := server.WatchLookupObjects(ctx, mgr, lookups[""]...); err != nil {
		return nil, err
	}
	for _, f := range integrations.Frameworks {
		if objs := lookups[f.Name]; len(objs) > 0 {
			// Waiting for the informers to sync here makes /readyz wait
			// for the lookups of the frameworks present at start; bounded,
			// as a controller's wait for its caches is.
			w.OnActivate(f.Name, func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, lookupSyncTimeout)
				defer cancel()
				return server.WatchLookupObjects(ctx, mgr, objs...)
			})
		}
	}
	if !o.disableReconcile {
		for _, c := range integrations.Controllers() {
			w.OnActivateAll(c.Frameworks, func(context.Context) error {
				terms.Activate(leader.Controller{Name: c.Name, Setup: func(m manager.Manager) error { return c.Setup(m, opts) }})
				return nil
			})
		}
	}
	return w, nil
}

// frameworkLookups answers the chain's lookups of an inactive framework's
// kinds with NotFound, without reading the cache: while its CRDs are not
// served no such object exists, and a cache read would start an informer
// that never syncs (or, for a framework that is off, one it must not start).
// Answering "no matches for kind" instead would deny, say, every JobSet
// owned by a TrainJob on a cluster without Trainer.
type frameworkLookups struct {
	webhook.Lookups
	active func(framework string) bool
}

func gateLookups(l webhook.Lookups, active func(framework string) bool) *frameworkLookups {
	return &frameworkLookups{Lookups: l, active: active}
}

func notServed(group, resource, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: resource}, name)
}

// Get answers NotFound for the kinds of a framework that is not active.
func (l *frameworkLookups) Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error) {
	if f, ok := integrations.Of(gvk.Group); ok && !l.active(f.Name) {
		return nil, notServed(gvk.Group, strings.ToLower(gvk.Kind)+"s", name)
	}
	return l.Lookups.Get(ctx, gvk, namespace, name)
}

// Namespace keeps the wrapped lookups' NamespaceLookup (WorkloadPolicies'
// namespaceSelector); namespaces are always served.
func (l *frameworkLookups) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if nl, ok := l.Lookups.(webhook.NamespaceLookup); ok {
		return nl.Namespace(ctx, name)
	}
	return &corev1.Namespace{}, notServed("", "namespaces", name)
}
