package server

import (
	"sync"

	"github.com/shepherd-k8s/shepherd/webhook/jsonvalue"
)

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

// arenas recycles the maps and arrays a request's objects are decoded into,
// the largest part of what an admission allocates. An arena goes back only
// once the answer is written: the chain, the patch and the audit trail
// keep nothing of the decoded objects past the request (audit records and
// events copy strings, which are never recycled).
var arenas = sync.Pool{New: func() any { return new(jsonvalue.Arena) }}

func getArena() *jsonvalue.Arena { return arenas.Get().(*jsonvalue.Arena) }

// putArena empties a and hands it back; nothing decoded with it may be used
// after.
func putArena(a *jsonvalue.Arena) {
	a.Reset()
	arenas.Put(a)
}
