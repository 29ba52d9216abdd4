// Package webhook is shepherd's admission: the chain every request goes
// through — the defaults (D-* rules: the MutatingAdmissionPolicies celrules
// runs in-process, and the Go default D-WL-1; a JSON patch against the raw
// object), then validation (the CEL rules of celrules plus the Go checks the
// integrations register). Package webhook/server serves it to a
// kube-apiserver; `shepherd check` runs the very same chain offline.
package webhook
