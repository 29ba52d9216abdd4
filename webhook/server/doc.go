// Package server serves shepherd's admission chain to a kube-apiserver: the
// mutating (/mutate) and validating (/validate) AdmissionReview handlers on
// controller-runtime's TLS webhook server, their metrics, the audit of every
// verdict, the periodic Workload API discovery V-TR-7 needs, and Setup, which
// wires it all into a manager for `shepherd serve`.
package server
