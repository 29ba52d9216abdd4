package hostile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

const (
	// timeout bounds every wait: the machine is small and shared.
	timeout = 60 * time.Second
	// heapBound is the most the Go heap may grow by under each attack:
	// without the bounds the first would take N × 8 MiB, the second
	// K × 8 MB.
	heapBound = 64 << 20
	// connHeapBound is the most one stalled connection may add to the heap,
	// client and server sides together (both are in this process): TLS and
	// HTTP buffers, goroutine stacks are not heap.
	connHeapBound = 128 << 10
	// declared is the body length the attackers declare: the largest the
	// server accepts, so it is not refused from the header alone.
	declared = server.DefaultMaxBodyBytes
)

func tlsConfig(t *testing.T) *tls.Config {
	t.Helper()
	cfg := env.WebhookTLS(t)
	// The apiserver's client certificate: sent only to a serve that asks
	// for one (--webhook-client-ca).
	cfg.Certificates = []tls.Certificate{clientPKI.cert}
	return cfg
}

// sources is how many source addresses the tests' many connections come
// from: each holds a few, far below --webhook-max-connections-per-client
// (a quarter of the cap), so the global bounds are what these tests meet.
const sources = 32

// from is a dialer whose connections come from source address i (of
// sources) in 127.0.1.0/24; Linux routes all of 127/8 to lo.
func from(i int) *net.Dialer {
	return &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%sources))}}
}

// liveHeap is the heap in use by live objects, after a collection.
func liveHeap() (live, totalAlloc uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.TotalAlloc
}

// openStalled opens n connections in parallel, from sources addresses,
// each sending the headers of a POST that declares declaredLen bytes, then
// body bytes of the body, then nothing more. A write the server cuts short is not an error: the server
// may refuse the body mid-way. The connections are closed when the test
// ends.
func openStalled(t *testing.T, n int, declaredLen int64, body []byte) []net.Conn {
	t.Helper()
	cfg := tlsConfig(t)
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				c, err := tls.DialWithDialer(from(i), "tcp", webhook, cfg)
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					continue
				}
				conns[i] = c
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: shepherd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					server.ValidatePath, declaredLen)
				_, _ = c.Write(body)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	for err := range errs {
		t.Fatal(err)
	}
	return conns
}

// admissionReview is a valid AdmissionReview to send shepherd directly.
const admissionReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"hostile-1",` +
	`"kind":{"group":"grove.io","version":"v1alpha1","kind":"PodCliqueSet"},` +
	`"resource":{"group":"grove.io","version":"v1alpha1","resource":"podcliquesets"},` +
	`"namespace":"default","name":"p","operation":"CREATE","userInfo":{"username":"alice"},` +
	`"object":{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"default"},"spec":{"replicas":1}}}}`

// answered asserts legitimate requests are answered: an AdmissionReview
// sent to the webhook directly, and a dry-run create through the apiserver,
// whose webhooks fail closed — it succeeds, defaulted, only if shepherd
// answered.
func answered(t *testing.T) {
	t.Helper()
	start := time.Now()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(t)}, Timeout: timeout}
	defer c.CloseIdleConnections()
	resp, err := c.Post("https://"+webhook+server.ValidatePath, "application/json", strings.NewReader(admissionReview))
	if err != nil {
		t.Fatalf("a legitimate AdmissionReview: %v", err)
	}
	var rv struct {
		Response struct{ UID string } `json:"response"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rv)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || rv.Response.UID != "hostile-1" {
		t.Fatalf("a legitimate AdmissionReview: HTTP %d, answer for %q, %v", resp.StatusCode, rv.Response.UID, err)
	}
	direct := time.Since(start)

	start = time.Now()
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "valid", "podcliqueset-training-minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace("default")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := env.Client.Create(ctx, obj, client.DryRunAll); err != nil {
		t.Fatalf("dry-run create through the apiserver: %v", err)
	}
	// D-PCS-3: shepherd's mutating webhook answered.
	cliques, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "cliques")
	if len(cliques) == 0 {
		t.Fatalf("created object has no cliques: %v", obj.Object)
	}
	if rp, _, _ := unstructured.NestedString(cliques[0].(map[string]any), "spec", "podSpec", "restartPolicy"); rp != "Never" {
		t.Errorf("dry-run create not defaulted by shepherd: restartPolicy %q", rp)
	}
	t.Logf("legitimate requests answered: AdmissionReview in %v, dry-run create through the apiserver in %v", direct, time.Since(start))
}

// Connections that declare the largest body and send almost none of it
// cost the server no memory of that size; the apiserver's admission
// requests are answered meanwhile.
func TestStalledDeclaredBodiesTakeNoMemory(t *testing.T) {
	n := stalled
	answered(t) // warm: the apiserver's connections and the chain's caches
	live0, total0 := liveHeap()
	start := time.Now()
	conns := openStalled(t, n, declared, []byte(`{"apiVersion":"admission.k8s.io/v1",`))
	testkit.Eventually(t, timeout, "the stalled connections to be open", func() bool {
		return cluster.MetricOf(t, "shepherd_webhook_open_connections") >= float64(n)
	})
	live1, total1 := liveHeap()
	grew := int64(live1) - int64(live0)
	t.Logf("%d connections declaring %d bytes, opened in %v: live heap %+.1f MiB (%.1f KiB per connection), %.1f MiB allocated meanwhile",
		n, declared, time.Since(start), float64(grew)/(1<<20), float64(grew)/float64(n)/1024, float64(total1-total0)/(1<<20))
	if bound := max(heapBound, int64(n)*connHeapBound); grew > bound {
		t.Errorf("live heap grew by %d MiB with %d stalled connections; bound %d MiB (declared: %d MiB)",
			grew>>20, n, bound>>20, int64(n)*declared>>20)
	}
	answered(t)
	closeAll(t, conns)
}

// closeAll closes conns and waits until the server has let go of them, so
// the next measurement does not count their memory.
func closeAll(t *testing.T, conns []net.Conn) {
	t.Helper()
	for _, c := range conns {
		c.Close()
	}
	testkit.Eventually(t, timeout, "the server to close the connections", func() bool {
		return cluster.MetricOf(t, "shepherd_webhook_open_connections") < 50 &&
			cluster.MetricOf(t, "shepherd_admission_buffered_bytes") == 0
	})
}

// Connections that send most of the largest body and stall hold what they
// sent, but together no more than --webhook-max-buffered-bytes: the bodies
// beyond it are refused 429.
func TestSentBodiesAreBoundedByTheBudget(t *testing.T) {
	const k = 24
	const sent = 8_000_000 // of declared, which is more
	refused := cluster.MetricOf(t, "shepherd_admission_bad_requests_total", "reason", "buffers_full")
	body := bytes.Repeat([]byte(" "), sent)
	live0, _ := liveHeap()
	start := time.Now()
	conns := openStalled(t, k, declared, body)
	live1, _ := liveHeap()
	runtime.KeepAlive(body) // the clients' own, in both measurements
	grew := int64(live1) - int64(live0)
	nowRefused := cluster.MetricOf(t, "shepherd_admission_bad_requests_total", "reason", "buffers_full") - refused
	t.Logf("%d connections sending %d bytes each in %v: live heap %+.1f MiB; %v refused 429 with %.1f MiB buffered",
		k, sent, time.Since(start), float64(grew)/(1<<20), nowRefused, cluster.MetricOf(t, "shepherd_admission_buffered_bytes")/(1<<20))
	if grew > heapBound {
		t.Errorf("live heap grew by %d MiB with %d connections holding %d bytes each; bound %d MiB", grew>>20, k, sent, heapBound>>20)
	}
	if nowRefused == 0 {
		t.Errorf("no body refused although %d × %d bytes exceed the budget of %d", k, sent, server.DefaultMaxBufferedBytes)
	}
	// Those refused were answered 429 at once, with Retry-After.
	var got429 int
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			continue // still being read, until the read timeout
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
			got429++
		}
	}
	t.Logf("%d of %d clients read a 429 with Retry-After", got429, k)
	closeAll(t, conns)
	answered(t)
}

// Over --webhook-max-connections, a connection is closed as soon as it is
// accepted: the client fails at once instead of waiting for its timeout.
// The connections come from many addresses, each within its own cap.
func TestConnectionsOverTheCapAreRefusedAtOnce(t *testing.T) {
	cfg := tlsConfig(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	start := time.Now()
	for i := 0; ; i++ {
		if i > maxConnections {
			t.Fatalf("%d connections accepted, cap %d", i, maxConnections)
		}
		dialStart := time.Now()
		c, err := tls.DialWithDialer(from(i), "tcp", webhook, cfg)
		if err != nil {
			took := time.Since(dialStart)
			t.Logf("connection %d refused in %v (%d opened in %v): %v", i+1, took, len(held), time.Since(start), err)
			// The bound is the behaviour: refused, not left to time out.
			if took > 5*time.Second {
				t.Errorf("refusing a connection over the cap took %v", took)
			}
			// A connection of the apiserver's may close meanwhile.
			if open := cluster.MetricOf(t, "shepherd_webhook_open_connections"); open < float64(maxConnections-10) {
				t.Errorf("%v connections open at the refusal, cap %d", open, maxConnections)
			}
			break
		}
		held = append(held, c)
	}
	if cluster.MetricOf(t, "shepherd_webhook_rejected_connections_total", "reason", "max_connections") == 0 {
		t.Error("no rejected connection counted")
	}
	closeAll(t, held)
	held = nil
	answered(t)
}
