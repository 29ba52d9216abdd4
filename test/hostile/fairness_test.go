package hostile

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// hostileSource is the one address the hostile client of the fairness
// test connects from; the apiserver connects from 127.0.0.1.
const hostileSource = "127.0.0.2"

// One client (one source address) trying to hold every connection the
// server accepts gets its share, --webhook-max-connections-per-client (a
// quarter of the cap), and its excess is refused at once; its bodies hold
// at most half of --webhook-max-buffered-bytes. Meanwhile the apiserver's
// admissions (from 127.0.0.1) keep succeeding: 20 creates, 0 failures.
func TestOneClientCannotTakeTheCaps(t *testing.T) {
	perClient := server.DefaultMaxConnectionsPerClient(maxConnections)
	answered(t) // warm
	cfg := tlsConfig(t)
	d := &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(hostileSource)}}
	refused0 := cluster.MetricOf(t, "shepherd_webhook_rejected_connections_total", "reason", "max_connections_per_client")

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	var slowest time.Duration
	start := time.Now()
	for range maxConnections + 10 {
		dialStart := time.Now()
		c, err := tls.DialWithDialer(d, "tcp", webhook, cfg)
		if err != nil {
			refused++
			slowest = max(slowest, time.Since(dialStart))
			continue
		}
		held = append(held, c)
	}
	t.Logf("client %s tried %d connections in %v: %d held (its share %d of %d), %d refused, the slowest refusal in %v",
		hostileSource, maxConnections+10, time.Since(start), len(held), perClient, maxConnections, refused, slowest)
	if len(held) != perClient {
		t.Errorf("client %s holds %d connections, want its share %d", hostileSource, len(held), perClient)
	}
	if slowest > 5*time.Second {
		t.Errorf("refusing a connection over the per-client cap took %v", slowest)
	}
	if got := cluster.MetricOf(t, "shepherd_webhook_rejected_connections_total", "reason", "max_connections_per_client") - refused0; got != float64(refused) {
		t.Errorf("shepherd_webhook_rejected_connections_total{reason=max_connections_per_client} moved by %v, want %d", got, refused)
	}

	// Its bodies: 8 of 3 MB each, declaring the largest; each reserves
	// 4 MiB as it arrives, so beyond its 16 MiB share they are refused.
	clientFull0 := cluster.MetricOf(t, "shepherd_admission_bad_requests_total", "reason", "client_buffers_full")
	body := make([]byte, 3_000_000)
	var wg sync.WaitGroup
	for _, c := range held[:8] {
		wg.Go(func() {
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: shepherd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				server.ValidatePath, declared)
			_, _ = c.Write(body)
		})
	}
	wg.Wait()
	testkit.Eventually(t, timeout, "the client's bodies over its share to be refused", func() bool {
		return cluster.MetricOf(t, "shepherd_admission_bad_requests_total", "reason", "client_buffers_full") > clientFull0
	})
	buffered := cluster.MetricOf(t, "shepherd_admission_buffered_bytes")
	t.Logf("the client's 8 bodies: %v refused 429 (client_buffers_full), %.1f MiB buffered (budget %d MiB)",
		cluster.MetricOf(t, "shepherd_admission_bad_requests_total", "reason", "client_buffers_full")-clientFull0,
		buffered/(1<<20), server.DefaultMaxBufferedBytes>>20)
	if buffered > float64(server.DefaultMaxBufferedBytes/2) {
		t.Errorf("%.0f bytes buffered with one client sending, over its share of %d", buffered, server.DefaultMaxBufferedBytes/2)
	}
	for _, c := range held[:8] {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
		}
	}

	// The apiserver's admissions, meanwhile.
	failures := creates(t, 20)
	if failures != 0 {
		t.Errorf("%d of 20 creates through the apiserver failed while one client held its share", failures)
	}
	closeAll(t, held)
	held = nil
	answered(t)
}

// creates creates n objects through the apiserver, whose webhooks fail
// closed, and deletes them; it returns how many creates failed.
func creates(t *testing.T, n int) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "valid", "podcliqueset-training-minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	failures := 0
	start := time.Now()
	for i := range n {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
			t.Fatal(err)
		}
		obj.SetNamespace("default")
		obj.SetName(fmt.Sprintf("fairness-%d-%d", time.Now().UnixNano(), i))
		if err := env.Client.Create(ctx, obj); err != nil {
			failures++
			t.Logf("create %d: %v", i, err)
			continue
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj, client.PropagationPolicy("Background")) })
	}
	t.Logf("%d creates through the apiserver in %v, %d failed", n, time.Since(start), failures)
	return failures
}
