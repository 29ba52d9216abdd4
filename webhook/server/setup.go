package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// Paths the webhooks are served at; deploy/webhook's configurations use them.
const (
	MutatePath   = "/mutate"
	ValidatePath = "/validate"
	AuditPath    = "/audit"
)

// TLSOptions is the webhook (and metrics) server's TLS policy: TLS 1.2 or
// newer, and HTTP/1.1 only unless enableHTTP2 — HTTP/2's stream
// multiplexing has been the vector of rapid-reset denial of service, and
// the apiserver's webhook client does not need it.
func TLSOptions(enableHTTP2 bool) []func(*tls.Config) {
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		if !enableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}}
}

// WatchLookupObjects registers the informers of objs (some of
// integrations.LookupObjects) with the manager's cache, so they start and sync before
// the first admission request needs them, which would otherwise wait for a
// full list. Before the manager starts it only registers them (they start
// and sync with the cache, and /readyz waits for them); once it runs, it
// also waits until they have synced or ctx ends. Call it for a framework's
// kinds only once the framework is active: an informer of a kind the
// apiserver does not serve never syncs.
func WatchLookupObjects(ctx context.Context, mgr manager.Manager, objs ...client.Object) error {
	for _, obj := range objs {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("watching %T for admission lookups: %w", obj, err)
		}
	}
	return nil
}

// Options configures Register.
type Options struct {
	// MaxBodyBytes bounds an AdmissionReview (DefaultMaxBodyBytes if zero).
	MaxBodyBytes int64
	// MaxInFlight bounds the admissions answered at once, over both
	// webhooks (DefaultMaxInFlight if zero).
	MaxInFlight int
	// MaxBufferedBytes bounds the request bodies held at once, over both
	// webhooks (DefaultMaxBufferedBytes if zero; at least MaxBodyBytes).
	MaxBufferedBytes int64
}

// Register serves admitter at /mutate and /validate on the manager's
// webhook server, WorkloadPolicy validation at /validate-workloadpolicy
// when admitter is also a PolicyChecker (the chain),
// webhook server (a WebhookServer in `shepherd serve`), both within one
// Limits, the audit ring at /audit on its metrics server, runs the
// Workload API probe, and adds the readiness checks: webhook server
// listening with its certificate loaded, caches synced, discovery done.
func Register(mgr manager.Manager, admitter webhook.Admitter, rec *audit.Recorder, probe *integrations.WorkloadAPIProbe, opts Options) error {
	log := mgr.GetLogger().WithName("admission")
	ws := mgr.GetWebhookServer()
	limits := NewLimits(opts.MaxInFlight, opts.MaxBufferedBytes, opts.MaxBodyBytes)
	ws.Register(MutatePath, &Handler{Mode: Mutating, Admitter: admitter, Audit: rec, MaxBodyBytes: opts.MaxBodyBytes, Limits: limits, Log: log})
	ws.Register(ValidatePath, &Handler{Mode: Validating, Admitter: admitter, Audit: rec, MaxBodyBytes: opts.MaxBodyBytes, Limits: limits, Log: log})
	if pc, ok := admitter.(PolicyChecker); ok {
		// Half the cores at most check policies; the rest stay with the
		// workloads' admissions.
		slots := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))
		ws.Register(PolicyPath, &Handler{Mode: Policies, Policies: pc, PolicySlots: slots, MaxBodyBytes: opts.MaxBodyBytes, Limits: limits, Log: log})
	}
	if err := mgr.AddMetricsServerExtraHandler(AuditPath, &audit.Handler{Ring: rec.Ring, Clock: rec.Clock}); err != nil {
		return fmt.Errorf("serving %s: %w", AuditPath, err)
	}
	if err := mgr.Add(probe); err != nil {
		return fmt.Errorf("adding the Workload API probe: %w", err)
	}
	synced := &cacheSynced{cache: mgr.GetCache()}
	if err := mgr.Add(synced); err != nil {
		return fmt.Errorf("adding the cache sync check: %w", err)
	}
	for name, check := range map[string]func(*http.Request) error{
		"webhook":     ws.StartedChecker(),
		"caches":      synced.ReadyChecker,
		"workloadapi": probe.ReadyChecker,
	} {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return fmt.Errorf("adding readiness check %s: %w", name, err)
		}
	}
	return nil
}

// cacheSynced records when the informers registered before the manager
// started (the built-in lookups', the CRDs', the policies') have synced. A
// framework's lookup informers are created only once its CRDs are served
// (integrations.Watcher): the /readyz check "frameworks" waits for those of
// the frameworks present at start, and a framework that arrives later never
// holds readiness back.
type cacheSynced struct {
	cache  cache.Cache
	synced atomic.Bool
}

func (c *cacheSynced) Start(ctx context.Context) error {
	if c.cache.WaitForCacheSync(ctx) {
		c.synced.Store(true)
		ctrl.LoggerFrom(ctx).Info("caches synced; admission lookups are ready")
	}
	return nil
}

func (c *cacheSynced) NeedLeaderElection() bool { return false }

func (c *cacheSynced) ReadyChecker(_ *http.Request) error {
	if !c.synced.Load() {
		return errors.New("caches have not synced yet")
	}
	return nil
}
