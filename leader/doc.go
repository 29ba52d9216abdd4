// Package leader runs the leader's half of shepherd serve: the reconcilers,
// the background audit, the UPDATE matchCondition keeper and, in
// self-signed mode, the certificate authority run only on the replica that
// holds the Lease, each term of leadership in a manager of its own (Terms),
// while the webhook server, the caches, the Events and the probes run in
// the serving manager for the life of the process; the Elector campaigns
// for the Lease and runs a term while it holds it. Losing the Lease stops
// the reconcilers and nothing else: admission never waits for a leader
// (docs/architecture.md).
package leader
