package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

const (
	clients      = 32
	warmup       = 3 * time.Second
	loadDuration = 15 * time.Second
)

// BenchmarkTLSLoad runs `shepherd serve` (the binary, as deployed, against
// a real apiserver for its caches) and drives its webhooks over TLS on
// loopback with 32 concurrent keep-alive clients sending a mix of every
// kind through both webhooks; any error fails it, the figures are
// diagnostics with no target. The clients are paced to offer SHEPHERD_LOAD_RATE requests/s
// in total (default 3000); SHEPHERD_LOAD_RATE=0 sends back to back, which
// measures saturation throughput (and then latency is mostly queueing).
// It runs its scenario once whatever b.N is.
func BenchmarkTLSLoad(b *testing.B) {
	c, err := cluster.New(cluster.Options{
		// The suite exercises the seed designs' fields directly: a cluster
		// whose CRDs carry them.
		CRDs:        cluster.SeedCRDs,
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		// Registered so the fixture below is admitted by shepherd like any
		// object; the load itself goes straight to the webhook server.
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			b.Errorf("stopping the control plane: %v", err)
		}
	}()
	dir := b.TempDir()
	bin := filepath.Join(dir, "shepherd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shepherd")
	build.Dir = cluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building shepherd: %v\n%s", err, out)
	}
	// serve runs as shepherd's ServiceAccount with the shipped RBAC.
	kubeconfig, err := c.ShepherdKubeconfig(cluster.RBACDefault)
	if err != nil {
		b.Fatal(err)
	}
	wh := c.Env.WebhookInstallOptions
	healthAddr := freeAddr(b)
	metricsAddr := freeAddr(b)
	logf, err := os.Create(filepath.Join(dir, "shepherd.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	srv := exec.Command(bin, "serve",
		"--kubeconfig="+kubeconfig,
		"--webhook-host=127.0.0.1", "--webhook-port="+strconv.Itoa(wh.LocalServingPort),
		"--cert-dir="+wh.LocalServingCertDir, "--cert-mode=cert-manager",
		"--metrics-bind-address="+metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address="+healthAddr,
		"--leader-elect=false", "--disable-reconcilers")
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
	}()
	if err := waitReady("http://"+healthAddr+"/readyz", 2*time.Minute); err != nil {
		log, _ := os.ReadFile(logf.Name())
		b.Fatalf("%v\n%s", err, log)
	}

	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadNamespace}}); err != nil {
		b.Fatal(err)
	}
	rt := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(runtimeFixture), &rt.Object); err != nil {
		b.Fatal(err)
	}
	if err := c.Client.Create(ctx, rt); err != nil {
		b.Fatalf("creating the runtime fixture: %v", err)
	}

	rate := 3000.0
	if s := os.Getenv("SHEPHERD_LOAD_RATE"); s != "" {
		if rate, err = strconv.ParseFloat(s, 64); err != nil {
			b.Fatalf("SHEPHERD_LOAD_RATE=%q: %v", s, err)
		}
	}
	calls := mix(b)
	// The generator shares the machine with the server: collecting less
	// often keeps its own pauses out of the measured latencies.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(wh.LocalServingCAData)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(wh.LocalServingPort))
	base := "https://" + addr

	// Warm up: caches, connection setup, CEL programs; and check every call
	// of the mix is answered with an allowed AdmissionReview.
	for _, cl := range calls {
		resp, err := post(newClient(pool), base, cl)
		if err != nil {
			b.Fatalf("%s: %v", cl.name, err)
		}
		if !resp.Allowed {
			b.Fatalf("%s is denied: %+v", cl.name, resp.Result)
		}
	}

	var (
		ok, failed atomic.Int64
		mu         sync.Mutex
		lat        []time.Duration
		wakes      []time.Duration
		firstErr   atomic.Value
	)
	stopAt := time.Now().Add(warmup + loadDuration)
	measureFrom := time.Now().Add(warmup)
	var cpuStart, genStart time.Duration
	var wg sync.WaitGroup
	go func() {
		time.Sleep(time.Until(measureFrom))
		cpuStart, _ = proc.CPU(srv.Process.Pid)
		genStart, _ = proc.CPU(proc.Self)
	}()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			hc := &conn{addr: addr, tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
			defer hc.close()
			local := make([]time.Duration, 0, 8192)
			var localWake []time.Duration
			// Paced (open loop): request i of this client is due at
			// next. When the previous response came back late, the
			// request is sent at once and its latency counts from when it
			// was due, so a slow server cannot hide queueing (no
			// coordinated omission). When the client was idle, waiting for
			// the due time, latency counts from the send: how late the
			// generator's own timer fired is not the server's latency (it
			// is reported on its own, as generator-wake-p99-ms). rate 0:
			// each client sends back to back.
			var interval time.Duration
			if rate > 0 {
				interval = time.Duration(float64(time.Second) * clients / rate)
			}
			next := time.Now().Add(time.Duration(w) * interval / clients)
			for i := w; time.Now().Before(stopAt); i++ {
				cl := calls[i%len(calls)]
				due := next
				if interval == 0 {
					due = time.Now()
				}
				start := due
				if wait := time.Until(next); interval > 0 && wait > 0 {
					time.Sleep(wait)
					start = time.Now()
					if !due.Before(measureFrom) {
						localWake = append(localWake, start.Sub(due))
					}
				}
				next = next.Add(interval)
				resp, err := hc.post(cl)
				d := time.Since(start)
				if due.Before(measureFrom) {
					continue
				}
				if err != nil || !resp.Allowed {
					failed.Add(1)
					if err == nil {
						err = fmt.Errorf("%s denied: %+v", cl.name, resp.Result)
					}
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
				local = append(local, d)
			}
			mu.Lock()
			lat = append(lat, local...)
			wakes = append(wakes, localWake...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	genEnd, _ := proc.CPU(proc.Self)
	genCPU := genEnd - genStart
	cpuEnd, err := proc.CPU(srv.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	rss, peak, err := proc.Memory(srv.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	if resp, err := http.Get("http://" + metricsAddr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = os.WriteFile("/tmp/shepherd-metrics.txt", body, 0o644)
	}
	sortDurations(lat)
	sortDurations(wakes)
	achieved := float64(ok.Load()) / loadDuration.Seconds()
	b.ReportMetric(achieved, "admissions/s")
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1e3, "p99-ms")
	b.ReportMetric(float64(failed.Load()), "errors")
	b.ReportMetric(float64(percentile(wakes, 0.99).Microseconds())/1e3, "generator-wake-p99-ms")
	b.ReportMetric(rate, "offered/s")
	b.ReportMetric((cpuEnd-cpuStart).Seconds()/loadDuration.Seconds(), "server-cpu-cores")
	b.ReportMetric(rss, "server-rss-MiB")
	b.ReportMetric(genCPU.Seconds()/loadDuration.Seconds(), "generator-cpu-cores")
	b.ReportMetric(peak, "server-peak-rss-MiB")
	if e := firstErr.Load(); e != nil {
		b.Errorf("%d errors; first: %v", failed.Load(), e)
	}
}

// conn is one keep-alive HTTP/1.1 connection over TLS that writes a
// request and reads its response in the calling goroutine. net/http's
// client hands every request to two goroutines per connection; on a 2-core
// machine shared with the server under test, those wake-ups made the
// generator's own scheduling delays a visible part of the measured tail.
type conn struct {
	addr string
	tls  *tls.Config
	c    *tls.Conn
	r    *bufio.Reader
	buf  bytes.Buffer
}

func (c *conn) post(cl call) (*admissionv1.AdmissionResponse, error) {
	if c.c == nil {
		tc, err := tls.Dial("tcp", c.addr, c.tls)
		if err != nil {
			return nil, err
		}
		c.c, c.r = tc, bufio.NewReader(tc)
	}
	c.buf.Reset()
	fmt.Fprintf(&c.buf, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", cl.path, c.addr, len(cl.body))
	c.buf.Write(cl.body)
	if _, err := c.c.Write(c.buf.Bytes()); err != nil {
		c.close()
		return nil, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.close()
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.close()
		return nil, err
	}
	return admissionResponse(resp.StatusCode, body)
}

func (c *conn) close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}

func newClient(pool *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			IdleConnTimeout:     time.Minute,
		},
	}
}

func post(hc *http.Client, base string, cl call) (*admissionv1.AdmissionResponse, error) {
	resp, err := hc.Post(base+cl.path, "application/json", bytes.NewReader(cl.body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return admissionResponse(resp.StatusCode, body)
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(url string, within time.Duration) error {
	err := testkit.Poll(200*time.Millisecond, within, func() error { return cluster.Healthy(url) })
	if err != nil {
		return fmt.Errorf("shepherd was not ready at %s: %w", url, err)
	}
	return nil
}

// processCPUSelf is the CPU time the benchmark process (the load generator)
// has used.
// admissionResponse is the AdmissionResponse of a webhook's HTTP answer.
func admissionResponse(status int, body []byte) (*admissionv1.AdmissionResponse, error) {
	if status != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", status, body)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil || rv.Response == nil {
		return nil, fmt.Errorf("not an AdmissionReview: %v: %s", err, body)
	}
	return rv.Response, nil
}
