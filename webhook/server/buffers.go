package server

import "sync"

// buffers recycles a request's byte buffers — the body once it is decoded,
// the answer once it is written — which are garbage at once otherwise: an
// admission's allocations set how often the garbage collector runs, and so
// the tail of its latency (see BenchmarkHandlerPodCliqueSet's
// alloc-floor-p99-µs). A buffer may be recycled only when nothing refers to
// it any more: the review decoder copies every string it keeps.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled bounds the buffers kept: one large request must not pin its
// memory for the life of the process.
const maxPooled = 64 << 10

// getBuffer returns an empty buffer of at least capacity n.
func getBuffer(n int) *[]byte {
	p := buffers.Get().(*[]byte)
	if cap(*p) < n {
		*p = make([]byte, 0, n)
	}
	*p = (*p)[:0]
	return p
}

// putBuffer hands a buffer back; the caller must not use it after.
func putBuffer(p *[]byte) {
	if cap(*p) <= maxPooled {
		buffers.Put(p)
	}
}
