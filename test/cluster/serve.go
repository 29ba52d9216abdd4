package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
)

// Serving is a `shepherd serve` running in this process against a
// control plane, with the production command line.
type Serving struct {
	// Health is the base URL of /healthz and /readyz.
	Health string
	// Metrics is the host:port of the metrics server (/metrics, /audit,
	// /status).
	Metrics string
	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
}

// Log is what serve has logged so far.
func (s *Serving) Log() string { return s.log.String() }

// Serve starts `shepherd serve` against c with its webhook server on the
// port c registered its webhooks for (Options.Webhooks) and the given extra
// flags, and waits until /readyz answers 200. Stop it with Stop.
func (c *Cluster) Serve(extra ...string) (*Serving, error) {
	dir, err := os.MkdirTemp("", "shepherd-serve-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, c.Env.KubeConfig, 0o600); err != nil {
		return nil, err
	}
	health, metrics := freeAddr(), freeAddr()
	args := []string{"serve",
		"--kubeconfig=" + kubeconfig,
		"--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=" + health,
		"--zap-log-level=error",
	}
	if wh := c.Env.WebhookInstallOptions; wh.LocalServingPort != 0 {
		args = append(args,
			"--webhook-host="+wh.LocalServingHost,
			"--webhook-port="+strconv.Itoa(wh.LocalServingPort),
			"--cert-dir="+wh.LocalServingCertDir,
			// envtest issued the certificate and injected its CA.
			"--cert-mode=cert-manager")
	}
	args = append(args, extra...)
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	root := app.NewRootCommand(log, log)
	root.SetArgs(args)
	s := &Serving{Health: "http://" + health, Metrics: metrics, cancel: cancel, done: make(chan error, 1), log: log}
	go func() {
		s.done <- root.ExecuteContext(ctx)
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
	resp, err := http.Get(s.Health + "/readyz?verbose")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %d: %s", resp.StatusCode, b)
	}
	return nil
}

func (s *Serving) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if last = s.Ready(); last == nil {
			return nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("shepherd serve exited before it was ready: %v\n%s", err, s.Log())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("shepherd serve was not ready within %v: %v\n%s", within, last, s.Log())
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

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a log sink serve writes from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
