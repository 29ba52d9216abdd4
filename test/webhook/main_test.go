// Package webhook tests `shepherd serve` end to end: a real kube-apiserver
// with shepherd's webhook configurations (deploy/webhook) registered through
// envtest calls the real serve command, running in this process with its
// production flags (TLS webhooks, authenticated metrics, WorkloadPolicy hot
// reload). Every assertion is on what the apiserver answers a client, on
// the stored objects, or on the served /audit and /metrics.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

var (
	env *cluster.Cluster
	// k is a client whose admission warnings are collected per call.
	k        client.Client
	warns    = &warningLog{}
	kube     kubernetes.Interface
	metrics  string // base URL of shepherd's (authenticated) metrics server
	webhookA string // host:port of shepherd's webhook server
	serveLog bytes.Buffer
	health   string // base URL of shepherd's health server
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, err := cluster.New(cluster.Options{
		// The suite exercises the seed designs' fields directly: a cluster
		// whose CRDs carry them.
		CRDs:        cluster.SeedCRDs,
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
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

	dir, err := os.MkdirTemp("", "shepherd-webhook-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// serve runs as shepherd's ServiceAccount with the shipped RBAC.
	kubeconfig, err := c.ShepherdKubeconfig(cluster.RBACDefault)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = warns
	if k, err = client.New(cfg, client.Options{Scheme: c.Client.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wh := c.Env.WebhookInstallOptions
	webhookA = net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	metricsAddr, healthAddr := freeAddr(), freeAddr()
	metrics = "https://" + metricsAddr
	health = "http://" + healthAddr

	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"serve",
		"--kubeconfig=" + kubeconfig,
		"--webhook-host=" + wh.LocalServingHost,
		"--webhook-port=" + strconv.Itoa(wh.LocalServingPort),
		"--cert-dir=" + wh.LocalServingCertDir,
		// envtest issued the certificate and injected its CA: serve the files.
		"--cert-mode=cert-manager",
		"--metrics-bind-address=" + metricsAddr,
		"--health-probe-bind-address=" + healthAddr,
		"--leader-elect=false",
		"--shutdown-drain-period=0s", // nothing routes to it but the test
		// The reconcilers have their own suites; here they would only add
		// load and status writes unrelated to admission.
		"--disable-reconcilers",
		"--workload-api-discovery-interval=2s",
		"--zap-log-level=error",
	}
	served := make(chan error, 1)
	go func() { served <- cluster.ServeMain(ctx, args, &serveLog) }()
	defer func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				fmt.Fprintln(os.Stderr, "shepherd serve:", err)
			}
		case <-time.After(time.Minute):
			fmt.Fprintln(os.Stderr, "shepherd serve did not stop within a minute of cancellation")
		}
	}()
	if err := waitReady("http://"+healthAddr+"/readyz", served); err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, serveLog.String())
		return 1
	}
	// /readyz covers the webhook, caches and policies; the metrics server
	// (which serves /audit) is a separate runnable that may bind a moment
	// later, so wait for it to accept connections too.
	if err := waitListening(metricsAddr, served); err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, serveLog.String())
		return 1
	}
	return m.Run()
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(url string, served chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "?verbose")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		}
		select {
		case err := <-served:
			return fmt.Errorf("shepherd serve exited before it was ready: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("shepherd serve was not ready after 2 minutes: %s", last)
}

func waitListening(addr string, served chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		select {
		case err := <-served:
			return fmt.Errorf("shepherd serve exited before its metrics server listened: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("shepherd's metrics server did not listen on %s within 2 minutes", addr)
}

// insecureTLS talks to shepherd's self-signed metrics server.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test client of a self-signed local server
}
