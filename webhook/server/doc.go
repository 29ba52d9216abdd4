// Package server serves shepherd's admission chain to a kube-apiserver: the
// mutating (/mutate) and validating (/validate) AdmissionReview handlers,
// the TLS webhook server they run on, their metrics, the audit of every
// verdict, the periodic Workload API discovery V-TR-7 needs, and Register,
// which wires it all into a manager for `shepherd serve`.
//
// Any client that reaches the webhook port can call it, so what one client
// can hold is bounded (httpserver.go, limits.go): the time to send a
// request, the connections open, the body bytes buffered — read as they
// arrive, never allocated from a declared length — and the admissions in
// flight; over a bound a client is refused at once (a closed connection,
// 408, 413 or 429), never left waiting, and the apiserver's failurePolicy
// decides. Metric labels taken from a request come from a closed set.
//
// A request's working memory — its body and answer buffers, the typed
// review, the maps its objects are decoded into, its patch — is recycled
// once the answer is written (buffers.go): what an admission allocates sets
// how often the garbage collector runs, and so the tail of its latency.
// Nothing the chain is handed may therefore be kept past the request; the
// audit trail and events copy the strings they keep.
package server
