// Package hostile runs `shepherd serve` (in this process, with its
// production flags) against a real control plane whose apiserver calls
// shepherd's webhooks, and attacks the webhook port the way any client that
// reaches it could: connections that declare the largest body and stall,
// connections that send most of a large body and stall, more connections
// than the server accepts. Each test asserts the outcome: the Go heap stays
// bounded, over-cap clients are turned away at once, and the apiserver's
// admission requests are still answered meanwhile.
//
// The heap is measured with runtime.MemStats: serve runs in this process,
// the control plane does not.
package hostile

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var (
	env     *cluster.Cluster
	webhook string // host:port of shepherd's webhook server
	// stalled is how many connections declare the largest body and stall
	// (SHEPHERD_HOSTILE_CONNS overrides it).
	stalled = 200
	// maxConnections is serve's --webhook-max-connections here: above the
	// stalled connections, so the apiserver's own still fit.
	maxConnections int
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if v := os.Getenv("SHEPHERD_HOSTILE_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "SHEPHERD_HOSTILE_CONNS=%q: want a positive number\n", v)
			return 2
		}
		stalled = n
	}
	maxConnections = stalled + 100
	c, err := cluster.New(cluster.Options{
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	env = c
	wh := c.Env.WebhookInstallOptions
	webhook = net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	s, err := c.Serve(
		"--leader-elect=false",
		// Admission only: the reconcilers would add heap of their own.
		"--disable-reconcilers",
		"--webhook-max-connections="+strconv.Itoa(maxConnections),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping shepherd serve:", err)
		}
	}()
	return m.Run()
}
