package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// How `shepherd serve` starts without an apiserver and stops without
// failing an admission. The webhooks fail closed: whenever no replica
// answers, nothing they cover can be created anywhere, so a replica must
// neither exit because the control plane is briefly away nor stop
// answering while the Service still routes to it.

// Back-off of the start-up wait for the apiserver.
const (
	apiserverRetryFirst = 500 * time.Millisecond
	apiserverRetryMax   = 5 * time.Second
)

// eventsQuiet is how long the Events client must have been idle for the
// queued Events to count as written. Events go out at --event-qps (50 by
// default), one every 20 ms while any are queued.
const eventsQuiet = time.Second

// waitForAPIServer returns once the apiserver answers discovery (the
// manager needs it to start), retrying with back-off and logging each
// failed attempt; nil too if ctx ends first. Meanwhile, healthAddr serves
// /healthz (alive: a restart would not help) and a failing /readyz, so
// the kubelet neither restarts the container nor routes to it.
func waitForAPIServer(ctx context.Context, cfg *rest.Config, healthAddr string, log logr.Logger) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = apiserverRetryMax
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return fmt.Errorf("creating a discovery client: %w", err)
	}
	var lastErr atomic.Pointer[string]
	if _, err := dc.ServerGroups(); err == nil {
		return nil
	} else {
		msg := err.Error()
		lastErr.Store(&msg)
	}
	if healthAddr != "" && healthAddr != "0" {
		stop, err := serveStartupProbes(healthAddr, func() string { return *lastErr.Load() })
		if err != nil {
			return err
		}
		// Closed before the manager binds the same address.
		defer stop()
	}
	delay := apiserverRetryFirst
	for attempt := 1; ; attempt++ {
		log.Info("waiting for the apiserver", "attempt", attempt, "error", *lastErr.Load(), "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		_, err := dc.ServerGroups()
		if err == nil {
			log.Info("the apiserver answers", "attempts", attempt+1)
			return nil
		}
		msg := err.Error()
		lastErr.Store(&msg)
		delay = min(2*delay, apiserverRetryMax)
	}
}

// serveStartupProbes serves /healthz (200) and /readyz (503, with why) on
// addr until the returned function is called.
func serveStartupProbes(addr string, why func() string) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--health-probe-bind-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the apiserver: "+why(), http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// lifecycle is what runServe drives once everything is set up.
type lifecycle struct {
	mgr      manager.Manager
	webhooks *server.WebhookServer
	// leader runs the reconcilers (elector.run or runWithoutElection)
	// until its context ends.
	leader   func(context.Context)
	draining *atomic.Bool
	events   *requestActivity
	drain    time.Duration // --shutdown-drain-period
	timeout  time.Duration // --graceful-shutdown-timeout
	log      logr.Logger
}

// run serves until ctx ends (SIGTERM), then stops in the order a rollout
// needs:
//
//  1. /readyz fails, the webhook server closes each connection after its
//     next response (Drain), and the reconcilers stop and the Lease is
//     released, so the other replica takes over at once;
//  2. for the drain period the webhook server keeps answering: requests
//     still routed here, until the endpoint is removed everywhere, succeed;
//  3. the webhook server stops accepting and answers what is in flight;
//  4. the Events still queued are written;
//  5. everything else stops (or is left behind at the timeout: the
//     caches hold nothing that must be written).
//
// Steps 3 to 5 share one bound, the graceful shutdown timeout, so that the
// whole fits in drain + timeout (the Deployment's
// terminationGracePeriodSeconds adds a margin).
func (lc *lifecycle) run(ctx context.Context) error {
	mgrCtx, stopMgr := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMgr()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- lc.mgr.Start(mgrCtx) }()
	leaderCtx, stopLeader := context.WithCancel(ctx)
	defer stopLeader()
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		lc.leader(leaderCtx)
	}()

	select {
	case err := <-mgrDone:
		stopLeader()
		// Bounded as at shutdown: serve must exit with the manager's
		// error, such as a required framework's missing CRDs, even if a
		// reconciler is slow to stop. (A term no longer starts against
		// a cache that never synced, which waited here until the bound:
		// leader.Terms.Run.)
		select {
		case <-leaderDone:
		case <-time.After(lc.timeout):
			lc.log.Error(nil, "the reconcilers did not stop within --graceful-shutdown-timeout; exiting without them", "timeout", lc.timeout)
		}
		if err == nil {
			err = errors.New("stopped on its own")
		}
		return fmt.Errorf("running the manager: %w", err)
	case <-ctx.Done():
	}

	start := time.Now()
	lc.log.Info("shutting down: readiness fails; admission is answered for the drain period", "drainPeriod", lc.drain)
	lc.draining.Store(true)
	lc.webhooks.Drain()
	stopLeader()
	select {
	case <-time.After(lc.drain):
	case err := <-mgrDone:
		return fmt.Errorf("running the manager: stopped during the drain period: %w", err)
	}

	budget, cancel := context.WithTimeout(context.WithoutCancel(ctx), lc.timeout)
	defer cancel()
	if err := lc.webhooks.Shutdown(budget); err != nil {
		lc.log.Error(err, "stopping the webhook server")
	}
	select {
	case <-leaderDone:
	case <-budget.Done():
		lc.log.Error(budget.Err(), "the reconcilers did not stop within --graceful-shutdown-timeout")
	}
	if !lc.events.waitIdle(budget, eventsQuiet) {
		lc.log.Error(budget.Err(), "Events still queued at the end of --graceful-shutdown-timeout are dropped")
	}
	stopMgr()
	// What is left are the caches, the probe and metrics servers and the
	// WorkloadPolicy reload: nothing a rollout waits for. An informer
	// backing off after an apiserver outage does not see the stop until
	// its back-off (up to 30 s) ends (client-go's watch-list retry); the
	// process does not wait it out past the timeout, nor fails for it.
	select {
	case err := <-mgrDone:
		if err != nil {
			lc.log.Error(err, "the caches and servers did not all stop; exiting without them (admission, the reconcilers and the Events were stopped first)")
		}
	case <-budget.Done():
		lc.log.Error(budget.Err(), "the caches and servers did not all stop within --graceful-shutdown-timeout; exiting without them (admission, the reconcilers and the Events were stopped first)", "timeout", lc.timeout)
	}
	lc.log.Info("stopped", "after", time.Since(start).Round(time.Millisecond))
	return nil
}

// requestActivity follows the requests of one client (the Events'), so
// that shutdown can wait until the Events queued have been written:
// client-go's broadcaster drops what is still queued when its context
// ends, and does not say how much that is.
type requestActivity struct {
	inFlight atomic.Int64
	last     atomic.Int64 // UnixNano of the last request's start or end
}

// wrap is a rest.Config WrapTransport.
func (a *requestActivity) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		a.inFlight.Add(1)
		a.last.Store(time.Now().UnixNano())
		defer func() {
			a.inFlight.Add(-1)
			a.last.Store(time.Now().UnixNano())
		}()
		return rt.RoundTrip(req)
	})
}

// waitIdle returns true once no request has been in flight for quiet, or
// false when ctx ends first.
func (a *requestActivity) waitIdle(ctx context.Context, quiet time.Duration) bool {
	t := time.NewTicker(quiet / 10)
	defer t.Stop()
	for {
		if a.inFlight.Load() == 0 && time.Since(time.Unix(0, a.last.Load())) >= quiet {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// withConfig is a manager whose GetConfig is cfg: events.Manager builds
// the Events client from it.
type withConfig struct {
	manager.Manager
	cfg *rest.Config
}

func (m *withConfig) GetConfig() *rest.Config { return m.cfg }

// runnableFilter is a manager whose Add keeps only some runnables. certs.Setup
// adds the certificate authority, which runs on the leader only, and the
// certificate file writer, which runs on every replica, to the manager it
// is given: the serving manager keeps the writer, each term the authority.
// Caches (the certificates' own) are kept by both.
type runnableFilter struct {
	manager.Manager
	leader bool // keep the runnables that need leader election, or the others
}

func (m *runnableFilter) Add(r manager.Runnable) error {
	// A cluster: the manager runs it with the caches, whatever it says
	// of leader election.
	if _, isCache := r.(interface{ GetCache() cache.Cache }); isCache {
		return m.Manager.Add(r)
	}
	needs := true // controller-runtime's default
	if le, ok := r.(manager.LeaderElectionRunnable); ok {
		needs = le.NeedLeaderElection()
	}
	if needs != m.leader {
		return nil
	}
	return m.Manager.Add(r)
}
