package server

import (
	"sync"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/shepherd-k8s/shepherd/webhook"
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

// exchange is one request's working memory, recycled whole once the answer
// is written: the typed review and request, the chain's Request, the arena
// the objects are decoded into — the largest part of what an admission
// allocates — the patch, and the request logger's sink. Nothing of it
// outlives the request: the chain, the patch and the audit trail keep no
// decoded map or array past it (audit records and events copy strings,
// which are never recycled), and nothing logs with the request's logger
// once it has answered.
type exchange struct {
	arena   jsonvalue.Arena
	patch   []jsonpatch.JsonPatchOperation // the chain's PatchScratch
	review  admissionv1.AdmissionReview
	request admissionv1.AdmissionRequest
	decoded decodedReview
	req     webhook.Request
	log     lazySink
}

var exchanges = sync.Pool{New: func() any {
	return &exchange{patch: make([]jsonpatch.JsonPatchOperation, 0, webhook.TypicalPatchOps)}
}}

func getExchange() *exchange { return exchanges.Get().(*exchange) }

// putExchange empties x and hands it back; nothing decoded into it may be
// used after.
func putExchange(x *exchange) {
	x.arena.Reset()
	patch := x.patch
	clear(patch[:cap(patch)]) // the operations' values are the request's
	*x = exchange{arena: x.arena, patch: patch[:0]}
	exchanges.Put(x)
}
