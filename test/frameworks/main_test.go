// Package frameworks tests that frameworks come and go (SPEC §9) end to end:
// `shepherd serve`, running in this process with its production flags and
// shepherd's webhook configurations registered, starts against a real
// kube-apiserver that serves none of Trainer's, JobSet's or Grove's CRDs,
// becomes ready without them, and picks each framework up — admission
// lookups and reconcilers — once the test installs its upstream CRDs,
// without a restart.
//
// The tests run one serve at a time (never in parallel): the metrics are
// per process, and every serve uses the one webhook port the apiserver
// calls. Controller names are unique per process too, so only one serve
// runs in this process; another runs as a child process of the test binary
// (see serveChild).
package frameworks

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// timeout bounds every wait: generous, the machine is small and shared.
const timeout = 60 * time.Second

var env *cluster.Cluster

// childEnv, when set, makes the test binary run the shepherd command line
// with its arguments instead of the tests.
const childEnv = "SHEPHERD_FRAMEWORKS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	var err error
	env, err = cluster.New(cluster.Options{
		CRDs: cluster.NoFrameworkCRDs,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// serve is one `shepherd serve` running in this process.
type serve struct {
	health string // base URL of its health server
	out    *syncBuffer
	done   chan error // receives serve's result once it returns
}

// startServe runs `shepherd serve` with the suite's flags plus args and
// stops it (waiting until it has) when the test ends.
func startServe(t *testing.T, args ...string) *serve {
	t.Helper()
	healthAddr := freeAddr(t)
	s := &serve{health: "http://" + healthAddr, out: &syncBuffer{}, done: make(chan error, 1)}
	root := app.NewRootCommand(s.out, s.out)
	root.SetArgs(append(serveArgs(t, healthAddr), args...))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(timeout):
			t.Errorf("shepherd serve did not stop within %s of cancellation", timeout)
		}
		if t.Failed() {
			t.Logf("shepherd serve output:\n%s", s.out.String())
		}
	})
	return s
}

// serveArgs are the suite's `shepherd serve` arguments.
func serveArgs(t *testing.T, healthAddr string) []string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	wh := env.Env.WebhookInstallOptions
	return []string{"serve",
		"--kubeconfig=" + kubeconfig,
		"--webhook-host=" + wh.LocalServingHost,
		"--webhook-port=" + strconv.Itoa(wh.LocalServingPort),
		"--cert-dir=" + wh.LocalServingCertDir,
		// envtest issued the certificate and injected its CA: serve the files.
		"--cert-mode=cert-manager",
		"--metrics-bind-address=0", // the gauges are read from this process's registry
		"--health-probe-bind-address=" + healthAddr,
		"--leader-elect=false",
		"--graceful-shutdown-timeout=10s",
		"--zap-log-level=error",
	}
}

// serveChild runs `shepherd serve` with the suite's flags plus args in a
// child process (this test binary, see childEnv) until it exits or
// timeout passes, and returns its output and error.
func serveChild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append(serveArgs(t, freeAddr(t)), args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// get returns the status code and body of GET path on the health server.
func (s *serve) get(path string) (int, string, error) {
	resp, err := http.Get(s.health + path) //nolint:gosec // local test URL
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady waits until /readyz answers 200, failing the test if serve
// exits first.
func (s *serve) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		code, body, err := s.get("/readyz?verbose")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprint(code, body, err)
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("shepherd serve exited before it was ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("shepherd serve was not ready within 2 minutes: %s", last)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer collects output written while serve runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// warningLog collects the admission warnings a client receives.
type warningLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warningLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}
