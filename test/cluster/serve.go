package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// Serving is a `shepherd serve` running in this process against a
// control plane, with the production command line.
type Serving struct {
	// Health is the base URL of /healthz and /readyz.
	Health string
	// Metrics is the host:port of the metrics server (/metrics, /audit,
	// /status).
	Metrics string
	cancel  context.CancelFunc
	done    chan error
	log     *SyncBuffer
}

// Log is what serve has logged so far.
func (s *Serving) Log() string { return s.log.String() }

// ServeArgs is the command line of `shepherd serve` against c as
// shepherd's ServiceAccount bound by the shipped RBAC (ShepherdKubeconfig;
// a --kubeconfig in extra replaces it): the webhook server on the port c registered
// its webhooks for (Options.Webhooks) with envtest's certificate, health
// and metrics on the given addresses, then extra (later flags win).
func (c *Cluster) ServeArgs(dir, health, metrics string, extra ...string) ([]string, error) {
	// serve runs as shepherd's ServiceAccount with the shipped RBAC
	// (rbac.go), unless the suite gives it a kubeconfig of its own.
	var kubeconfig string
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--kubeconfig=") }) {
		var err error
		variant := rbacVariant(extra)
		if kubeconfig, err = c.ShepherdKubeconfig(variant); err != nil {
			return nil, err
		}
		if ns := leaseNamespace(extra); ns != "" && ns != ShepherdNamespace {
			if err := c.grantLeaseNamespace(context.Background(), variant, ns); err != nil {
				return nil, err
			}
		}
	}
	args := []string{"serve",
		"--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=" + health,
		"--zap-log-level=error",
		// A test stops serve when it is done with it, and nothing routes
		// to it but the test: the drain a rollout needs would only make
		// every stop 10 s longer. A test of the drain passes its own.
		"--shutdown-drain-period=0s",
	}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig="+kubeconfig)
	}
	if wh := c.Env.WebhookInstallOptions; wh.LocalServingPort != 0 {
		args = append(args,
			"--webhook-host="+wh.LocalServingHost,
			"--webhook-port="+strconv.Itoa(wh.LocalServingPort),
			"--cert-dir="+wh.LocalServingCertDir,
			// envtest issued the certificate and injected its CA.
			"--cert-mode=cert-manager")
	}
	return append(args, extra...), nil
}

// Serve starts `shepherd serve` in this process (ServeArgs) and waits
// until /readyz answers 200. Stop it with Stop. A health or metrics port
// another process took between FreeAddr's probe and serve's bind is picked
// again, twice at most.
func (c *Cluster) Serve(extra ...string) (*Serving, error) {
	var err error
	for range 3 {
		var s *Serving
		if s, err = c.serve(extra...); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
	return nil, err
}

func (c *Cluster) serve(extra ...string) (*Serving, error) {
	dir, err := os.MkdirTemp("", "shepherd-serve-")
	if err != nil {
		return nil, err
	}
	health, metrics := FreeAddr(), FreeAddr()
	args, err := c.ServeArgs(dir, health, metrics, extra...)
	if err != nil {
		return nil, err
	}
	log := &SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Serving{Health: "http://" + health, Metrics: metrics, cancel: cancel, done: make(chan error, 1), log: log}
	go func() {
		s.done <- ServeMain(ctx, args, log)
		os.RemoveAll(dir)
	}()
	if err := s.waitReady(2 * time.Minute); err != nil {
		return nil, withStop(err, s.Stop())
	}
	return s, nil
}

func withStop(err, stopErr error) error {
	if stopErr != nil {
		return fmt.Errorf("%w (and stopping it: %v)", err, stopErr)
	}
	return err
}

// Ready reports /readyz's answer: nil when ready.
func (s *Serving) Ready() error {
	return Healthy(s.Health + "/readyz?verbose")
}

// Healthy GETs a health URL (a /readyz or /healthz on loopback) and is nil
// when it answers 200; otherwise it says why: the error, or the answer's
// status and body.
func Healthy(url string) error {
	resp, err := http.Get(url) //nolint:gosec // local test URL
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// Get returns the status code and body of GET path on the health server.
func (s *Serving) Get(path string) (int, string, error) {
	resp, err := http.Get(s.Health + path) //nolint:gosec // local test URL
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (s *Serving) waitReady(within time.Duration) error {
	err := testkit.Poll(200*time.Millisecond, within, func() error {
		select {
		case err := <-s.done:
			s.done <- err
			return testkit.Stop(fmt.Errorf("shepherd serve exited before it was ready: %v", err))
		default:
		}
		return s.Ready()
	})
	if err != nil {
		return fmt.Errorf("shepherd serve was not ready: %w\n%s", err, s.Log())
	}
	return nil
}

// Stop cancels serve and waits for it to return.
func (s *Serving) Stop() error {
	s.cancel()
	select {
	case err := <-s.done:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("shepherd serve did not stop within a minute")
	}
}

// FreeAddr is a free 127.0.0.1 port, for a server a test starts. It is
// picked below the kernel's ephemeral range (ip_local_port_range): a port
// the kernel hands out for ":0" is also one it hands to outgoing
// connections, so between this probe and the server's bind a busy client
// (test/faults' 100 creates a second) could take it, and the server would
// exit with "address already in use" (the stop 42 CI failure).
//
// A process walks the range from a random start, so it never hands out a
// port twice, and two test processes (go test runs packages side by side)
// meet only if their walks reach the same port at the same moment.
func FreeAddr() string {
	low := ephemeralLow()
	if low > freeAddrFloor+1000 {
		freeAddrOnce.Do(func() { freeAddrNext.Store(int64(rand.IntN(low - freeAddrFloor))) })
		for range 200 {
			port := freeAddrFloor + int(freeAddrNext.Add(1)%int64(low-freeAddrFloor))
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			addr := l.Addr().String()
			l.Close()
			return addr
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreePort is FreeAddr's port, for a flag that takes a port alone.
func FreePort() int {
	_, port, _ := net.SplitHostPort(FreeAddr())
	n, _ := strconv.Atoi(port)
	return n
}

// freeAddrFloor is the lowest port FreeAddr picks: above the well-known
// and most registered services' ports.
const freeAddrFloor = 20000

var (
	freeAddrOnce sync.Once
	// freeAddrNext is the offset in the range of the next port to try.
	freeAddrNext atomic.Int64
)

// ephemeralLow is the first port of the kernel's ephemeral range, 0 where
// it cannot be read (FreeAddr then falls back to ":0").
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// SyncBuffer is a log sink written from many goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Warnings collects the warning headers a client receives (set it as the
// rest.Config's WarningHandler, or use Cluster.WarningsClient).
type Warnings struct {
	mu   sync.Mutex
	msgs []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

// Take returns the warnings received since the last Take.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// Contains reports whether a warning received since the last Take holds s.
func (w *Warnings) Contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.msgs, func(m string) bool { return strings.Contains(m, s) })
}

// WarningsClient is a client of the control plane whose warnings (the
// admission warnings among them) go to a collector of its own, so tests
// running side by side each see their own. It shares the cluster client's
// REST mapper: no discovery per client.
func (c *Cluster) WarningsClient(t testing.TB) (client.Client, *Warnings) {
	t.Helper()
	w := &Warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	k, err := client.New(cfg, client.Options{Scheme: c.Client.Scheme(), Mapper: c.Client.RESTMapper()})
	if err != nil {
		t.Fatalf("a client of the control plane: %v", err)
	}
	return k, w
}

// WebhookTLS is the TLS configuration of a client of the webhook servers
// the suite's serve replicas run: it trusts envtest's serving CA, whose
// certificate every replica serves for 127.0.0.1.
func (c *Cluster) WebhookTLS(t testing.TB) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.Env.WebhookInstallOptions.LocalServingCAData) {
		t.Fatal("envtest's webhook CA is not PEM")
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// WebhookClient is an HTTP client of those webhook servers (WebhookTLS,
// changed by mod when it is not nil), with a 30 s timeout. It offers
// HTTP/2 as the apiserver does.
func (c *Cluster) WebhookClient(t testing.TB, mod func(*tls.Config)) *http.Client {
	t.Helper()
	cfg := c.WebhookTLS(t)
	if mod != nil {
		mod(cfg)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}
