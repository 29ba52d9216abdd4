// Package server serves shepherd's admission chain to a kube-apiserver: the
// mutating (/mutate) and validating (/validate) AdmissionReview handlers,
// the TLS webhook server they run on, their metrics, the audit of every
// verdict, and Register, which wires it all into a manager for `shepherd
// serve` (with the Workload API probe V-TR-7 needs,
// integrations.WorkloadAPIProbe).
//
// Any client that reaches the webhook port can call it, so what one client
// can hold is bounded (httpserver.go, listener.go, limits.go): the time to
// send a request, the connections open — in all and per source address —
// the body bytes buffered — read as they arrive, never allocated from a
// declared length; one address at most half of them — and the admissions
// in flight; over a bound a client is refused at once (a closed
// connection, 408, 413 or 429), never left waiting, and the apiserver's
// failurePolicy decides. Metric labels taken from a request come from a
// closed set.
//
// With a client CA (--webhook-client-ca) only the apiserver, presenting its
// client certificate, is answered: any other request is a 401 before its
// body is read, so it writes no Event and no audit record. Either way each
// Request says whether its caller was authenticated, and the audit trail
// carries it.
//
// A rollout loses no admission (httpserver.go): on shutdown the server keeps
// answering for a drain period while the Service stops routing to it
// (readiness already fails), closing each connection after its answer so
// clients reconnect elsewhere, then stops accepting and finishes what is in
// flight.
//
// The AdmissionReview is decoded with apimachinery's JSON decoder into
// k8s.io/api's typed review, as the apiserver reads it; its objects stay raw
// JSON until the chain decodes them, once, and the answer is encoded with
// encoding/json. Nothing is pooled or hand-encoded: the few microseconds
// that saved are noise beside the apiserver's two TLS calls per admission.
package server
