package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// freeAddr is a 127.0.0.1 address no one listens on (a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// probe is the status and body of GET http://addr/path, or an error.
func probe(addr, path string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestServeStartupProbes: while serve waits for the apiserver the kubelet
// finds it alive but not ready, and why; once stopped, the address is
// free for the manager's probes. An address taken is an error naming the
// flag.
func TestServeStartupProbes(t *testing.T) {
	addr := freeAddr(t)
	stop, err := serveStartupProbes(addr, func() string { return "connection refused" })
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := probe(addr, "/healthz"); err != nil || code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q (%v), want 200 ok", code, body, err)
	}
	if code, body, err := probe(addr, "/readyz"); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the apiserver: connection refused") {
		t.Errorf("/readyz = %d %q (%v), want 503 saying why", code, body, err)
	}
	if _, err := serveStartupProbes(addr, nil); err == nil || !strings.Contains(err.Error(), "--health-probe-bind-address "+addr) {
		t.Errorf("a second listener on %s: %v, want an error naming the flag", addr, err)
	}
	stop()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is still taken after stop: %v", err)
	}
	_ = l.Close()
}

// flakyAPIServer answers discovery with 503 until ready is closed.
type flakyAPIServer struct {
	ready    chan struct{}
	requests atomic.Int32
}

func (s *flakyAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	select {
	case <-s.ready:
	default:
		http.Error(w, "etcd is starting", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/api":
		_, _ = io.WriteString(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`)
	case "/apis":
		_, _ = io.WriteString(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	default:
		http.NotFound(w, r)
	}
}

// TestWaitForAPIServer: serve waits for an apiserver that does not answer
// yet, failing /readyz with the apiserver's last error meanwhile, and goes
// on once it answers; its own probes are closed by then. A context ended
// while waiting is no error.
func TestWaitForAPIServer(t *testing.T) {
	api := &flakyAPIServer{ready: make(chan struct{})}
	srv := httptest.NewServer(api)
	defer srv.Close()
	health := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- waitForAPIServer(context.Background(), &rest.Config{Host: srv.URL}, health, logr.Discard())
	}()

	testkit.Eventually(t, 10*time.Second, "/readyz to say what the apiserver answered", func() (bool, string) {
		code, body, err := probe(health, "/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the apiserver"), fmt.Sprintf("%d %s", code, body)
	})
	testkit.Eventually(t, 10*time.Second, "a retry", func() bool { return api.requests.Load() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("returned %v before the apiserver answered", err)
	default:
	}
	close(api.ready)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("waitForAPIServer = %v, want nil once the apiserver answers", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still waiting after the apiserver answered")
	}
	if _, _, err := probe(health, "/healthz"); err == nil {
		t.Error("the start-up probes still answer after the wait; the manager could not bind their address")
	}

	down := &flakyAPIServer{ready: make(chan struct{})}
	srv2 := httptest.NewServer(down)
	defer srv2.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- waitForAPIServer(ctx, &rest.Config{Host: srv2.URL}, "0", logr.Discard()) }()
	testkit.Eventually(t, 10*time.Second, "a first attempt", func() bool { return down.requests.Load() >= 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ended while waiting: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not return when its context ended")
	}
}

// fakeManager is a manager whose Start runs start, whose Add records the
// runnables, and whose cache is cache; it records the readiness checks
// and the metrics server's extra handlers added to it.
type fakeManager struct {
	manager.Manager
	start  func(context.Context) error
	cache  cache.Cache
	mu     sync.Mutex
	added  []manager.Runnable
	readyz map[string]healthz.Checker
	extra  map[string]http.Handler
}

func (m *fakeManager) GetCache() cache.Cache          { return m.cache }
func (m *fakeManager) GetRESTMapper() meta.RESTMapper { return nil }

func (m *fakeManager) AddReadyzCheck(name string, c healthz.Checker) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readyz == nil {
		m.readyz = map[string]healthz.Checker{}
	}
	m.readyz[name] = c
	return nil
}

func (m *fakeManager) AddMetricsServerExtraHandler(path string, h http.Handler) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.extra == nil {
		m.extra = map[string]http.Handler{}
	}
	m.extra[path] = h
	return nil
}

func (m *fakeManager) Start(ctx context.Context) error { return m.start(ctx) }

func (m *fakeManager) Add(r manager.Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.added = append(m.added, r)
	return nil
}

// timeline records when things happened, relative to its start.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	at    map[string]time.Duration
}

func newTimeline() *timeline { return &timeline{start: time.Now(), at: map[string]time.Duration{}} }

func (tl *timeline) mark(what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.at[what] = time.Since(tl.start)
}

func (tl *timeline) get(what string) (time.Duration, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	d, ok := tl.at[what]
	return d, ok
}

// TestLifecycleShutdownOrder: on SIGTERM readiness fails and the
// reconcilers stop at once, while the manager (admission, caches) keeps
// running for the drain period and stops only after it.
func TestLifecycleShutdownOrder(t *testing.T) {
	tl := newTimeline()
	// Long enough that a loaded machine (make test runs suites beside
	// this) does not stop the reconcilers late by chance.
	const drain = 2 * time.Second
	mgr := &fakeManager{start: func(ctx context.Context) error {
		<-ctx.Done()
		tl.mark("manager stopped")
		return nil
	}}
	lc := &lifecycle{mgr: mgr, webhooks: server.NewWebhookServer(server.ServingOptions{}), draining: &atomic.Bool{}, events: &requestActivity{},
		drain: drain, timeout: 5 * time.Second, log: logr.Discard(),
		leader: func(ctx context.Context) {
			tl.mark("leading")
			<-ctx.Done()
			tl.mark("leader stopped")
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lc.run(ctx) }()
	testkit.Eventually(t, 5*time.Second, "the leader's half running", func() bool { _, ok := tl.get("leading"); return ok })
	if lc.draining.Load() {
		t.Error("draining before shutdown")
	}
	tl.mark("SIGTERM")
	cancel()
	testkit.Eventually(t, 5*time.Second, "readiness to fail", lc.draining.Load)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want a clean stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return")
	}
	sigterm, _ := tl.get("SIGTERM")
	leaderStopped, _ := tl.get("leader stopped")
	managerStopped, ok := tl.get("manager stopped")
	if !ok {
		t.Fatal("the manager was never stopped")
	}
	if leaderStopped-sigterm >= drain {
		t.Errorf("reconcilers stopped %v after SIGTERM; want at once, not after the drain period %v", leaderStopped-sigterm, drain)
	}
	if managerStopped-sigterm < drain {
		t.Errorf("manager stopped %v after SIGTERM, within the drain period %v", managerStopped-sigterm, drain)
	}
}

// TestLifecycleManagerFails: a manager that stops on its own, or fails,
// ends serve with an error (and the leader's half with it), before or
// during the drain period.
func TestLifecycleManagerFails(t *testing.T) {
	newLC := func(start func(context.Context) error, leaderStopped *atomic.Bool) *lifecycle {
		return &lifecycle{mgr: &fakeManager{start: start}, webhooks: server.NewWebhookServer(server.ServingOptions{}), draining: &atomic.Bool{},
			events: &requestActivity{}, drain: time.Hour, timeout: time.Second, log: logr.Discard(),
			leader: func(ctx context.Context) { <-ctx.Done(); leaderStopped.Store(true) }}
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"fails", errors.New("port taken"), "running the manager: port taken"},
		{"stops on its own", nil, "running the manager: stopped on its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stopped atomic.Bool
			err := newLC(func(context.Context) error { return tc.err }, &stopped).run(context.Background())
			if err == nil || err.Error() != tc.want {
				t.Errorf("run = %v, want %q", err, tc.want)
			}
			if !stopped.Load() {
				t.Error("run returned with the leader's half still running")
			}
		})
	}

	// During the drain period (an hour here): serve ends at once.
	var stopped atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	lc := newLC(func(mctx context.Context) error {
		cancel() // SIGTERM
		time.Sleep(100 * time.Millisecond)
		return errors.New("cache failed")
	}, &stopped)
	errc := make(chan error, 1)
	go func() { errc <- lc.run(ctx) }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "stopped during the drain period: cache failed") {
			t.Errorf("run = %v, want the failure during the drain period", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a manager failing during the drain period did not end serve")
	}
}

// TestLifecycleManagerFailsWhileTheLeaderHangs: a manager that fails ends
// serve with its error within the graceful shutdown timeout even when the
// leader's half does not stop (a term left waiting for caches that the
// stopped manager will never sync).
func TestLifecycleManagerFailsWhileTheLeaderHangs(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	const timeout = 300 * time.Millisecond
	lc := &lifecycle{mgr: &fakeManager{start: func(context.Context) error {
		return errors.New("framework grove is on, but the cluster does not serve its CRDs")
	}},
		webhooks: server.NewWebhookServer(server.ServingOptions{}), draining: &atomic.Bool{}, events: &requestActivity{},
		drain: time.Hour, timeout: timeout, log: logr.Discard(), leader: func(context.Context) { <-block }}
	errc := make(chan error, 1)
	go func() { errc <- lc.run(context.Background()) }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "framework grove is on") {
			t.Errorf("run = %v, want the manager's error", err)
		}
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("serve did not end while the leader's half hung after the manager failed")
	}
}

// TestLifecycleShutdownIsBounded: reconcilers and a manager that do not
// stop hold shutdown no longer than the graceful shutdown timeout.
func TestLifecycleShutdownIsBounded(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	const timeout = 500 * time.Millisecond
	lc := &lifecycle{mgr: &fakeManager{start: func(context.Context) error { <-block; return nil }},
		webhooks: server.NewWebhookServer(server.ServingOptions{}), draining: &atomic.Bool{}, events: &requestActivity{},
		drain: 0, timeout: timeout, log: logr.Discard(), leader: func(context.Context) { <-block }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := lc.run(ctx); err != nil {
		t.Errorf("run = %v, want nil: what did not stop is left behind", err)
	}
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Errorf("shutdown took %v, want about the timeout %v", took, timeout)
	}
}

// TestRequestActivity: requests through the wrapped transport are
// followed; waitIdle waits for none in flight and a quiet period, and
// gives up when its context ends.
func TestRequestActivity(t *testing.T) {
	a := &requestActivity{}
	release := make(chan struct{})
	entered := make(chan struct{})
	rt := a.wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) {
		close(entered)
		<-release
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/events", nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	if n := a.inFlight.Load(); n != 1 {
		t.Errorf("%d requests in flight, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if a.waitIdle(ctx, 10*time.Millisecond) {
		t.Error("idle with a request in flight")
	}
	close(release)
	const quiet = 150 * time.Millisecond
	start := time.Now()
	idleCtx, idleCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer idleCancel()
	if !a.waitIdle(idleCtx, quiet) {
		t.Fatal("not idle within 10s of the last response")
	}
	if took := time.Since(start); took < quiet/2 {
		t.Errorf("idle %v after the last request, want about %v of quiet", took, quiet)
	}
	if n := a.inFlight.Load(); n != 0 {
		t.Errorf("%d requests in flight after the response, want 0", n)
	}
}

// Runnables of each kind certs.Setup adds, named.
type (
	plainRunnable struct{ name string }
	cacheRunnable struct{ plainRunnable }
	// electedRunnable says whether it needs the leader.
	electedRunnable struct {
		plainRunnable
		leader bool
	}
)

func (plainRunnable) Start(context.Context) error  { return nil }
func (r plainRunnable) id() string                 { return r.name }
func (cacheRunnable) GetCache() cache.Cache        { return nil }
func (r electedRunnable) NeedLeaderElection() bool { return r.leader }

// TestRunnableFilter: the serving manager keeps what runs on every
// replica, a term what needs the leader (controller-runtime's default for
// a runnable that does not say), and both keep caches.
func TestRunnableFilter(t *testing.T) {
	runnables := []manager.Runnable{
		cacheRunnable{plainRunnable{"cache"}},
		electedRunnable{plainRunnable{"authority"}, true},
		electedRunnable{plainRunnable{"writer"}, false},
		plainRunnable{"unassigned"},
	}
	kept := func(leader bool) []string {
		m := &fakeManager{}
		f := &runnableFilter{Manager: m, leader: leader}
		for _, r := range runnables {
			if err := f.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, r := range m.added {
			out = append(out, r.(interface{ id() string }).id())
		}
		return out
	}
	if diff := cmp.Diff([]string{"cache", "writer"}, kept(false)); diff != "" {
		t.Errorf("serving manager keeps (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cache", "authority", "unassigned"}, kept(true)); diff != "" {
		t.Errorf("a term keeps (-want +got):\n%s", diff)
	}
}

// TestWithConfig: the Events client is built from the wrapped config.
func TestWithConfig(t *testing.T) {
	cfg := &rest.Config{Host: "https://events"}
	if got := (&withConfig{Manager: &fakeManager{}, cfg: cfg}).GetConfig(); got != cfg {
		t.Errorf("GetConfig = %v, want the wrapped config", got)
	}
}
