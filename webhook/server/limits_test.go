package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// allocatedBy is the bytes the heap allocated while f ran n times, per run.
func allocatedBy(n int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// A client declares its body's length before sending a byte of it; the
// handler must not allocate what it declares.
func TestDeclaredLengthIsNotAllocated(t *testing.T) {
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}, Log: logr.Discard()}
	for _, tc := range []struct {
		name     string
		declared int64
		code     int
	}{
		// Within the cap: read what arrives (10 bytes), then the body ends
		// short of what was declared.
		{"declares the cap, sends 10 bytes", DefaultMaxBodyBytes, http.StatusBadRequest},
		// Over the cap: refused before reading.
		{"declares 1 GiB", 1 << 30, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			per := allocatedBy(20, func() {
				r := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(`{"apiVersi`))
				r.ContentLength = tc.declared
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				code = w.Code
			})
			if code != tc.code {
				t.Errorf("HTTP %d, want %d", code, tc.code)
			}
			// A request's own working memory is tens of KiB; the declared
			// length is at least 8 MiB.
			if per > 1<<20 {
				t.Errorf("allocated %d bytes per request declaring %d", per, tc.declared)
			}
			t.Logf("allocated %d bytes per request declaring %d", per, tc.declared)
		})
	}
}

// A body of unknown length (chunked) is read up to the cap and no further.
func TestChunkedBodyOverTheCapIs413(t *testing.T) {
	const maxBody = 1 << 20
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}, MaxBodyBytes: maxBody,
		Limits: NewLimits(1, 0, maxBody), Log: logr.Discard()}
	var code int
	per := allocatedBy(5, func() {
		r := httptest.NewRequest(http.MethodPost, "/validate", io.LimitReader(zeros{}, 64<<20))
		r.ContentLength = -1
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		code = w.Code
	})
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("HTTP %d, want 413", code)
	}
	// Doubling to the cap allocates under twice the cap, not the 64 MiB sent.
	if per > 3*maxBody {
		t.Errorf("allocated %d bytes per request for a cap of %d", per, maxBody)
	}
	if got := h.Limits.buffered.Load(); got != 0 {
		t.Errorf("%d bytes still reserved once answered", got)
	}
}

// onRead calls f on its first Read.
type onRead struct {
	r    io.Reader
	f    func()
	once sync.Once
}

func (o *onRead) Read(p []byte) (int, error) { o.once.Do(o.f); return o.r.Read(p) }

// zeros is an endless body of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// blockingAdmitter holds every request until release is closed, and says
// on entered when one arrives.
type blockingAdmitter struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingAdmitter) hold() *webhook.Verdict {
	b.entered <- struct{}{}
	<-b.release
	return &webhook.Verdict{Allowed: true}
}
func (b *blockingAdmitter) Default(context.Context, *webhook.Request) *webhook.Verdict {
	return b.hold()
}
func (b *blockingAdmitter) Validate(context.Context, *webhook.Request) *webhook.Verdict {
	return b.hold()
}
func (b *blockingAdmitter) Admit(context.Context, *webhook.Request) *webhook.Verdict { return b.hold() }

// With every admission slot taken, one more request is answered 429 at
// once — not queued behind the others — and they finish normally.
func TestInFlightCapAnswers429AtOnce(t *testing.T) {
	const slots = 4
	adm := &blockingAdmitter{entered: make(chan struct{}, slots+1), release: make(chan struct{})}
	limits := NewLimits(slots, 0, 0)
	h := &Handler{Mode: Validating, Admitter: adm, Limits: limits, Log: logr.Discard()}
	body := review(t, admissionv1.Create, false)

	var wg sync.WaitGroup
	codes := make(chan int, slots)
	for range slots {
		wg.Go(func() { codes <- serve(t, h, http.MethodPost, "application/json", body).Code })
	}
	for range slots {
		<-adm.entered
	}
	start := time.Now()
	w := serve(t, h, http.MethodPost, "application/json", body)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != retryAfterSeconds {
		t.Errorf("request over the cap: HTTP %d, Retry-After %q; want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	t.Logf("request over the cap of %d answered in %v", slots, time.Since(start))
	// The last slot may also go while the body is read — it is taken only
	// once the body is in — and the request is refused alike: one slot is
	// free when it arrives, and taken by the time its body has arrived.
	limits.inFlight.Add(-1)
	r := httptest.NewRequest(http.MethodPost, "/validate", &onRead{r: bytes.NewReader(body), f: func() { limits.inFlight.Add(1) }})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("request finding no slot once its body is read: HTTP %d, want 429", w.Code)
	}

	close(adm.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a held request was answered HTTP %d, want 200", c)
		}
	}
	if n := limits.inFlight.Load(); n != 0 {
		t.Errorf("%d slots still taken once every request is answered", n)
	}
}

// Bodies held at once are bounded in bytes: with one client stalled
// mid-body holding most of the budget, another client's large body is
// refused 429, and a small one still goes through.
func TestBufferedBytesAreBounded(t *testing.T) {
	const maxBody = 256 << 10
	limits := NewLimits(16, maxBody+maxBody/2, maxBody)
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}, MaxBodyBytes: maxBody,
		Limits: limits, Log: logr.Discard()}

	// The stalled client: sends 200 KiB of its body, then nothing.
	pr, pw := io.Pipe()
	stalled := make(chan int, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/validate", pr)
		r.ContentLength = -1
		r.RemoteAddr = "192.0.2.99:1234" // not httptest's: its own share
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		stalled <- w.Code
	}()
	if _, err := pw.Write(bytes.Repeat([]byte(" "), 200<<10)); err != nil {
		t.Fatal(err)
	}
	held := limits.buffered.Load()
	if held < 200<<10 {
		t.Fatalf("%d bytes reserved for 200 KiB received", held)
	}

	big := httptest.NewRequest(http.MethodPost, "/validate", io.LimitReader(zeros{}, maxBody))
	big.ContentLength = -1
	w := httptest.NewRecorder()
	h.ServeHTTP(w, big)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "request bytes") {
		t.Errorf("large body beside the stalled one: HTTP %d %q, want 429", w.Code, w.Body.String())
	}
	if w := serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, false)); w.Code != http.StatusOK {
		t.Errorf("small body beside the stalled one: HTTP %d %s, want 200", w.Code, w.Body.String())
	}

	pw.CloseWithError(io.ErrUnexpectedEOF)
	if code := <-stalled; code != http.StatusBadRequest {
		t.Errorf("stalled request: HTTP %d once its body broke off, want 400", code)
	}
	if got := limits.buffered.Load(); got != 0 {
		t.Errorf("%d bytes still reserved once every request is answered", got)
	}
}

// One source address holds at most half of the buffered bytes: with a
// client holding its share in stalled bodies, its next body is refused 429
// (client_buffers_full), while another client's bodies, small and large,
// go through; its entry leaves the map once its bodies are answered.
func TestOneClientHoldsAtMostHalfTheBufferedBytes(t *testing.T) {
	const maxBody = 256 << 10
	limits := NewLimits(16, 4*maxBody, maxBody)
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}, MaxBodyBytes: maxBody,
		Limits: limits, Log: logr.Discard()}
	const hostile, other = "192.0.2.66", "192.0.2.1" // httptest's own
	hostileAddr := netip.MustParseAddr(hostile)

	// The hostile client: two bodies of 200 KiB sent, then nothing; each
	// reserves 256 KiB, together its share (half of 1 MiB).
	var stalled []chan int
	var writers []*io.PipeWriter
	for range 2 {
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		go func() {
			r := httptest.NewRequest(http.MethodPost, "/validate", pr)
			r.ContentLength = -1
			r.RemoteAddr = hostile + ":40000"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			done <- w.Code
		}()
		if _, err := pw.Write(bytes.Repeat([]byte(" "), 200<<10)); err != nil {
			t.Fatal(err)
		}
		stalled, writers = append(stalled, done), append(writers, pw)
	}
	if held, _ := limits.clientBytes(hostileAddr); held != 2*maxBody {
		t.Fatalf("the hostile client holds %d bytes, want %d", held, 2*maxBody)
	}

	refused := testutil.ToFloat64(badRequests.WithLabelValues(string(Validating), "client_buffers_full"))
	r := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(review(t, admissionv1.Create, false)))
	r.RemoteAddr = hostile + ":40001"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "--webhook-max-buffered-bytes") {
		t.Errorf("the hostile client's third body: HTTP %d %q, want 429 with Retry-After naming --webhook-max-buffered-bytes", w.Code, w.Body.String())
	}
	if d := testutil.ToFloat64(badRequests.WithLabelValues(string(Validating), "client_buffers_full")) - refused; d != 1 {
		t.Errorf("client_buffers_full moved by %v, want 1", d)
	}

	for _, tc := range []struct {
		name string
		body io.Reader
	}{
		{"small", bytes.NewReader(review(t, admissionv1.Create, false))},
		// The largest accepted: a review padded with spaces.
		{"largest", io.LimitReader(bytes.NewReader(append(review(t, admissionv1.Create, false), bytes.Repeat([]byte(" "), maxBody)...)), maxBody)},
	} {
		r := httptest.NewRequest(http.MethodPost, "/validate", tc.body)
		r.ContentLength = -1
		r.RemoteAddr = other + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Errorf("another client's %s body beside the hostile one's: HTTP %d %s, want 200", tc.name, w.Code, w.Body.String())
		}
	}

	for _, pw := range writers {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for _, done := range stalled {
		<-done
	}
	if held, clients := limits.clientBytes(hostileAddr); held != 0 || clients != 0 {
		t.Errorf("once answered: the hostile client holds %d bytes, %d clients in the map; want 0 and 0", held, clients)
	}
	if got := limits.buffered.Load(); got != 0 {
		t.Errorf("%d bytes still reserved once every request is answered", got)
	}
}

// reviewOf is an AdmissionReview of the given kind and operation.
func reviewOf(kind, op string) string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",`+
		`"kind":{"group":"made.up","version":"v1","kind":%q},"operation":%q,"object":{"metadata":{"name":"x"}}}}`, kind, op)
}

// scrape is controller-runtime's registry, which `shepherd serve` serves
// at /metrics: its number of series and its size as text.
func scrape(t *testing.T) (series, size int) {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		series += len(mf.GetMetric())
		size += len(mf.String())
	}
	return series, size
}

// Kinds and operations come from the request body: whatever a client
// sends, the metrics have one "other" series for what shepherd does not
// admit, and /metrics does not grow with the number of kinds sent.
func TestMetricLabelsAreAClosedSet(t *testing.T) {
	verdict := &webhook.Verdict{Allowed: false, Violations: []webhook.Violation{
		{Rule: webhook.RuleDecode, Message: "no", Action: webhook.ActionDeny}}}
	rec := audit.NewRecorder(16, nil, nil)
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: verdict}, Audit: rec, Log: logr.Discard()}
	send := func(kind, op string) {
		if w := serve(t, h, http.MethodPost, "application/json", []byte(reviewOf(kind, op))); w.Code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", w.Code, w.Body.String())
		}
	}

	// Operations are a closed set already (any other is a 400).
	other := admissionRequests.WithLabelValues(string(Validating), audit.OtherLabel, "CREATE", verdictDenied)
	known := admissionRequests.WithLabelValues(string(Validating), "TrainJob", "UPDATE", verdictDenied)
	before, beforeKnown := testutil.ToFloat64(other), testutil.ToFloat64(known)
	send("MadeUp-warmup", "CREATE")
	send("TrainJob", "UPDATE")
	series, size := scrape(t)
	const kinds = 1000
	for i := range kinds {
		send(fmt.Sprintf("MadeUp%d", i), "CREATE")
	}
	if got := testutil.ToFloat64(other) - before; got != kinds+1 {
		t.Errorf("requests counted under kind and operation %q: %v, want %d", audit.OtherLabel, got, kinds+1)
	}
	if got := testutil.ToFloat64(known) - beforeKnown; got != 1 {
		t.Errorf("TrainJob UPDATE counted %v times, want 1", got)
	}
	seriesAfter, sizeAfter := scrape(t)
	if seriesAfter != series {
		t.Errorf("/metrics has %d series after %d made-up kinds, %d before", seriesAfter, kinds, series)
	}
	// Only counts and sums change: a few bytes, whatever the kinds.
	if grown := sizeAfter - size; grown > 512 {
		t.Errorf("/metrics grew by %d bytes over %d made-up kinds", grown, kinds)
	}
	t.Logf("/metrics: %d series, %d bytes before %d made-up kinds; %d series, %d bytes after", series, size, kinds, seriesAfter, sizeAfter)
}
