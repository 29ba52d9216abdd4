package load

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// BenchmarkHandlerPodCliqueSet admits a typical Training PodCliqueSet the
// way the apiserver does: the mutating handler (decode, default, encode the
// patch), then the validating handler on the defaulted object (decode,
// validate, encode). One op is both calls; after a warm-up to steady state,
// every op is timed and the median and p99 reported. A diagnostic, with no
// target: what an admission costs end to end is the apiserver's two calls
// over TLS, of which this is a small part.
func BenchmarkHandlerPodCliqueSet(b *testing.B) {
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(nil, true), Rules: seedcrds.Config(celrules.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	rec := audit.NewRecorder(1024, nil, nil)
	// The logger `shepherd serve` builds by default (zap, JSON, info), its
	// output thrown away: what a request's logger costs is measured too.
	log := zap.New(zap.WriteTo(io.Discard))
	mutate := &server.Handler{Mode: server.Mutating, Admitter: chain, Audit: rec, Log: log}
	validate := &server.Handler{Mode: server.Validating, Admitter: chain, Audit: rec, Log: log}

	obj := toJSON(b, typicalPCS)
	mreq := reviewOf(b, admissionv1.Create, obj, nil)
	// The validating webhook sees the object after the mutating patch.
	defaulted := chain.Default(context.Background(), server.RequestFrom(mustReview(b, mreq)))
	if !defaulted.Allowed {
		b.Fatalf("the typical PodCliqueSet is denied: %+v", defaulted.Violations)
	}
	dobj, err := json.Marshal(defaulted.Object)
	if err != nil {
		b.Fatal(err)
	}
	vreq := reviewOf(b, admissionv1.Create, dobj, nil)
	if v := chain.Validate(context.Background(), server.RequestFrom(mustReview(b, vreq))); !v.Allowed {
		b.Fatalf("the defaulted PodCliqueSet is denied: %+v", v.Violations)
	}

	// The requests are built the way net/http's server hands them to a
	// handler (a parsed request with a body), not by httptest.NewRequest,
	// which parses a request line per call: the handler is what is measured.
	var w responseBuffer
	serve := func(h http.Handler, body []byte) {
		r, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "/", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		w.reset()
		h.ServeHTTP(&w, r)
		if w.code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", w.code, w.body.String())
		}
	}
	// Steady state first: a fresh process's heap grows into memory the
	// kernel has never mapped, and until the collector has recycled it a
	// few times the page faults make ops about twice as slow — a start-up
	// transient of a few hundred milliseconds, not the latency a running
	// server has. Their p99 is reported on its own.
	warm := warmUp(b, func() { serve(mutate, mreq); serve(validate, vreq) })

	lat := make([]time.Duration, 0, b.N)
	mlat := make([]time.Duration, 0, b.N)
	vlat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		serve(mutate, mreq)
		mid := time.Now()
		serve(validate, vreq)
		end := time.Now()
		lat = append(lat, end.Sub(start))
		mlat, vlat = append(mlat, mid.Sub(start)), append(vlat, end.Sub(mid))
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	// CPU time per op: unlike wall-clock percentiles, it does not grow
	// when other processes compete for the machine's cores (GC included).
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(len(warm)), "warmup-ops")
	b.ReportMetric(float64(percentile(warm, 0.99).Nanoseconds())/1e3, "warmup-p99-µs")
	sortDurations(lat)
	b.ReportMetric(float64(percentile(lat, 0.5).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(percentile(lat, 0.9).Nanoseconds())/1e3, "p90-µs")
	b.ReportMetric(float64(percentile(lat, 0.95).Nanoseconds())/1e3, "p95-µs")
	// Each webhook call on its own: the apiserver makes them one at a time.
	sortDurations(mlat)
	sortDurations(vlat)
	b.ReportMetric(float64(percentile(mlat, 0.5).Nanoseconds())/1e3, "mutate-p50-µs")
	b.ReportMetric(float64(percentile(mlat, 0.99).Nanoseconds())/1e3, "mutate-p99-µs")
	b.ReportMetric(float64(percentile(vlat, 0.5).Nanoseconds())/1e3, "validate-p50-µs")
	b.ReportMetric(float64(percentile(vlat, 0.99).Nanoseconds())/1e3, "validate-p99-µs")
	// The same number of ops of pure arithmetic lasting the pair's median:
	// the p99 this machine allows work of that length at all.
	_, floor := noiseFloor(percentile(lat, 0.5), min(b.N, 50000))
	b.ReportMetric(float64(floor.Nanoseconds())/1e3, "noise-floor-p99-µs")
	// The same number of ops that only allocate what one op allocated, with
	// the chain (and so the same live heap) still in memory: the p99 this
	// machine's garbage collector allows that much allocation at all.
	_, afloor := allocFloor(int64(ms1.TotalAlloc-ms0.TotalAlloc)/int64(b.N), min(b.N, 50000))
	runtime.KeepAlive(chain)
	b.ReportMetric(float64(afloor.Nanoseconds())/1e3, "alloc-floor-p99-µs")
}

// warmUpCycles is how many garbage collections the warm-up waits for: by
// then the heap has been collected and regrown to its steady size.
const warmUpCycles = 3

// warmUp runs op until warmUpCycles garbage collections have completed
// (at most 200,000 times) and returns the ops' latencies, sorted.
func warmUp(b *testing.B, op func()) []time.Duration {
	b.Helper()
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	cycles := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var lat []time.Duration
	for until := cycles() + warmUpCycles; cycles() < until && len(lat) < 200_000; {
		for range 100 {
			start := time.Now()
			op()
			lat = append(lat, time.Since(start))
		}
	}
	sortDurations(lat)
	return lat
}

func processCPU(b *testing.B) time.Duration {
	cpu, err := proc.CPU(proc.Self)
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

func mustReview(b *testing.B, body []byte) *server.Review {
	rv, err := server.DecodeReview(body)
	if err != nil {
		b.Fatal(err)
	}
	return rv
}

// responseBuffer is a reusable http.ResponseWriter.
type responseBuffer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *responseBuffer) reset() {
	if w.header == nil {
		w.header = http.Header{}
	}
	clear(w.header)
	w.code = 0
	w.body.Reset()
}

func (w *responseBuffer) Header() http.Header { return w.header }

func (w *responseBuffer) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *responseBuffer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}
