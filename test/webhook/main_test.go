// Package webhook tests `shepherd serve` end to end: a real kube-apiserver
// with shepherd's webhook configurations (deploy/webhook) registered through
// envtest calls the real serve command, running in this process with its
// production flags (TLS webhooks, authenticated metrics, WorkloadPolicy hot
// reload). Every assertion is on what the apiserver answers a client, on
// the stored objects, or on the served /audit and /metrics.
package webhook

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

var (
	env *cluster.Cluster
	// k is a client whose admission warnings are collected per call.
	k        client.Client
	warns    = &cluster.Warnings{}
	kube     kubernetes.Interface
	metrics  string // base URL of shepherd's (authenticated) metrics server
	webhookA string // host:port of shepherd's webhook server
	health   string // base URL of shepherd's health server
)

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		// The suite exercises the seed designs' fields directly: a cluster
		// whose CRDs carry them.
		CRDs:        cluster.SeedCRDs,
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env, setup)
}

// setup makes the suite's clients and starts serve as shepherd's
// ServiceAccount with the shipped RBAC and the production flags.
func setup(c *cluster.Cluster) (cluster.Teardown, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = warns
	var err error
	if k, err = client.New(cfg, client.Options{Scheme: c.Client.Scheme()}); err != nil {
		return nil, err
	}
	if kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	wh := c.Env.WebhookInstallOptions
	webhookA = net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	s, err := c.Serve("--leader-elect=false",
		// The reconcilers have their own suites; here they would only add
		// load and status writes unrelated to admission.
		"--disable-reconcilers",
		"--workload-api-discovery-interval=2s")
	if err != nil {
		return nil, err
	}
	metrics, health = "https://"+s.Metrics, s.Health
	// /readyz covers the webhook, caches and policies; the metrics server
	// (which serves /audit) is a separate runnable that may bind a moment
	// later, so wait for it to accept connections too.
	if err := waitListening(s.Metrics); err != nil {
		return s.Teardown, err
	}
	return s.Teardown, nil
}

func waitListening(addr string) error {
	err := testkit.Poll(200*time.Millisecond, 2*time.Minute, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	if err != nil {
		return fmt.Errorf("shepherd's metrics server did not listen on %s: %w", addr, err)
	}
	return nil
}

// insecureTLS talks to shepherd's self-signed metrics server.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test client of a self-signed local server
}
