package server

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// Defaults of the admission handlers' limits (`shepherd serve`'s flags).
const (
	// DefaultMaxInFlight bounds the admissions answered at once. The chain
	// is CPU-bound (a few hundred µs) apart from its cached lookups, so a
	// few hundred at once is far beyond what a replica serves usefully, and
	// well below what it could hold in memory.
	DefaultMaxInFlight = 256
	// DefaultMaxBufferedBytes bounds the request bodies held at once: four
	// AdmissionReviews of DefaultMaxBodyBytes, or thousands of typical ones
	// (tens of KiB). Decoding a body takes about five times its size again
	// (the objects' maps), held under the same reservation, so this keeps a
	// replica inside the Deployment's 512 MiB even when clients send the
	// largest bodies at once.
	DefaultMaxBufferedBytes int64 = 4 * DefaultMaxBodyBytes
)

// retryAfterSeconds is the Retry-After of a 429: client-go, which the
// apiserver's webhook client is built on, waits that long and retries
// within the webhook's timeout, after which failurePolicy decides.
const retryAfterSeconds = "1"

// Limits bounds what the admission handlers hold at once: the requests
// being admitted and the body bytes buffered, in all and from each source
// address. One Limits is shared by the handlers of a server. A nil *Limits
// bounds nothing.
//
// Reading a body is not counted as in flight: a client that stalls
// mid-body holds a connection (bounded by the listener) and the bytes it
// sent (bounded here), not a slot a legitimate request needs.
//
// One source address may hold at most half of the buffered bytes (but
// always one largest body): a client sending large bodies slowly cannot
// spend the whole budget and have the apiserver's requests refused.
type Limits struct {
	maxInFlight int64
	maxBuffered int64
	// maxPerClient bounds the bytes one source address holds.
	maxPerClient int64
	inFlight     atomic.Int64
	buffered     atomic.Int64

	// mu guards byClient, the bytes held by each source address holding
	// some: an address leaves the map when its bytes return to zero, so it
	// is bounded by the requests being read.
	mu       sync.Mutex
	byClient map[netip.Addr]int64
}

// NewLimits returns limits of maxInFlight admissions and maxBuffered body
// bytes at once; zero or less takes the default. maxBuffered is raised to
// one largest body (maxBody, DefaultMaxBodyBytes if zero) if below it, so
// a lone request of the largest size accepted is never refused.
func NewLimits(maxInFlight int, maxBuffered, maxBody int64) *Limits {
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlight
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	if maxBuffered <= 0 {
		maxBuffered = DefaultMaxBufferedBytes
	}
	// +1: telling a body of exactly maxBody from a larger one takes one
	// byte more (readBody).
	maxBuffered = max(maxBuffered, maxBody+1)
	return &Limits{maxInFlight: int64(maxInFlight), maxBuffered: maxBuffered,
		maxPerClient: max(maxBuffered/2, maxBody+1), byClient: map[netip.Addr]int64{}}
}

// full says whether every admission slot is taken, without taking one: a
// request arriving then is refused before its body is read.
func (l *Limits) full() bool {
	return l != nil && l.inFlight.Load() >= l.maxInFlight
}

// acquire takes an admission slot; false when all are taken.
func (l *Limits) acquire() bool {
	if l == nil {
		return true
	}
	if l.inFlight.Add(1) > l.maxInFlight {
		l.inFlight.Add(-1)
		return false
	}
	inFlightRequests.Inc()
	return true
}

// release hands back a slot acquire took.
func (l *Limits) release() {
	if l != nil {
		l.inFlight.Add(-1)
		inFlightRequests.Dec()
	}
}

// reservation is the body bytes one request holds against its Limits,
// counted against the share of its client (the source address; invalid:
// unknown, no share applies).
type reservation struct {
	limits *Limits
	client netip.Addr
	n      int64
}

// grow raises the reservation to n bytes; nil when it did, else the error
// to answer (errClientBuffersFull or errBuffersFull), the reservation
// unchanged.
func (r *reservation) grow(n int64) *httpError {
	d := n - r.n
	if r.limits == nil || d <= 0 {
		return nil
	}
	if !r.limits.addClient(r.client, d) {
		return errClientBuffersFull
	}
	if r.limits.buffered.Add(d) > r.limits.maxBuffered {
		r.limits.buffered.Add(-d)
		r.limits.addClient(r.client, -d)
		return errBuffersFull
	}
	bufferedBytes.Add(float64(d))
	r.n = n
	return nil
}

// release hands back every byte reserved.
func (r *reservation) release() {
	if r.limits != nil && r.n > 0 {
		r.limits.buffered.Add(-r.n)
		r.limits.addClient(r.client, -r.n)
		bufferedBytes.Sub(float64(r.n))
		r.n = 0
	}
}

// addClient adds d bytes (d < 0: hands them back) to what client holds;
// false, and unchanged, when that would take it past its share. An
// invalid client has no share.
func (l *Limits) addClient(client netip.Addr, d int64) bool {
	if !client.IsValid() {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.byClient[client] + d
	switch {
	case d > 0 && n > l.maxPerClient:
		return false
	case n <= 0:
		delete(l.byClient, client)
	default:
		l.byClient[client] = n
	}
	return true
}

// clientBytes is what client holds, and clients how many hold some (for
// tests).
func (l *Limits) clientBytes(client netip.Addr) (n int64, clients int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byClient[client], len(l.byClient)
}
