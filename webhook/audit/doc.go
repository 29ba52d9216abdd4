// Package audit is the audit trail of admission verdicts
// (docs/architecture.md, "The admission chain"). Every Deny, Warn and Audit
// verdict — of real and dry-run requests alike — becomes one Record,
// written to a structured log line, the counter
// shepherd_policy_verdicts_total{rule,action,kind}, a Kubernetes Event with
// reason PolicyViolation (real requests only: the webhooks declare
// sideEffects NoneOnDryRun), and a bounded in-memory Ring that Handler serves
// as JSON at /audit with the filters namespace, rule, user and since.
//
// A record says whether its caller was authenticated (a client certificate
// of --webhook-client-ca, or the audit sink's token); without it the user
// is the caller's claim, and the Event says "(caller not authenticated)".
// The Events of each namespace are bounded (NamespaceLimiter), so a flood
// of requests cannot fill a namespace's Events: over the bound an Event is
// dropped and counted, the record kept.
//
// The background audit of stored objects (package background) writes its
// findings here too, as records of operation AUDIT (RecordStored): a log
// line and the ring, without Events or the verdict counter.
package audit
