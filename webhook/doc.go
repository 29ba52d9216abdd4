// Package webhook is shepherd's admission: the chain every request goes
// through — the kind's defaulter (D-* rules, JSON patch against the raw
// object), then validation (the CEL rules of celrules plus the Go lookups) —
// and the HTTP handlers that serve it to a kube-apiserver. `shepherd check`
// runs the very same chain offline.
package webhook
