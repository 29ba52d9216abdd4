// Package audit is the audit trail of admission verdicts (SPEC §7). Every
// Deny, Warn and Audit verdict — of real and dry-run requests alike — becomes
// one Record, written to a structured log line, the counter
// shepherd_policy_verdicts_total{rule,action,kind}, a Kubernetes Event with
// reason PolicyViolation (real requests only: the webhooks declare
// sideEffects NoneOnDryRun), and a bounded in-memory Ring that Handler serves
// as JSON at /audit with the filters namespace, rule, user and since.
//
// The background audit of stored objects (package background) writes its
// findings here too, as records of operation AUDIT (RecordStored): a log
// line and the ring, without Events or the verdict counter.
package audit
