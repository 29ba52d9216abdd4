// Package server serves shepherd's admission chain to a kube-apiserver: the
// mutating (/mutate) and validating (/validate) AdmissionReview handlers on
// controller-runtime's TLS webhook server, their metrics, the audit of every
// verdict, the periodic Workload API discovery V-TR-7 needs, and Setup, which
// wires it all into a manager for `shepherd serve`.
//
// A request's working memory — its body and answer buffers, the typed
// review, the maps its objects are decoded into, its patch — is recycled
// once the answer is written (buffers.go): what an admission allocates sets
// how often the garbage collector runs, and so the tail of its latency.
// Nothing the chain is handed may therefore be kept past the request; the
// audit trail and events copy the strings they keep.
package server
