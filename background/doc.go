// Package background is the background audit: it judges the objects
// already stored — TrainJobs, runtimes, JobSets, PodCliqueSets, PodCliques
// and PodCliqueScalingGroups of the active frameworks — against every active
// rule, built-in and WorkloadPolicy, CEL rules and lookups alike, exactly as
// the validating webhook would judge a create of each (dry run, no user,
// validations only: nothing is defaulted or written back).
//
// Core is the pure part: given the stored objects, the chain's Validate and
// the rule-set version, it returns per object what fails and the aggregate
// Results (per rule: violating objects, the first few samples in a fixed
// order, counts per kind; per namespace: the violating objects, the shape an
// OpenReports writer needs). It keeps each object's verdict keyed by its
// UID, resourceVersion, generation, labels and annotations and the rule-set
// version, so an object is judged once per (object generation, rule set):
// a status write to it, or a pass triggered by another object, reuses the
// verdict. Labels and annotations count beside the generation because the
// apiserver does not bump a custom resource's generation for them, and they
// carry the seed knobs (shepherd.dev/workload-type, ...) and what
// objectSelectors match.
//
// Auditor runs Core on the leader replica only (one per leadership term,
// like the reconcilers), from informers of its own that run as long as the
// term — one list and a watch per kind, never a list per pass — with one
// worker, so admission never waits on it. A pass runs when a term starts, when the chain's rule set changes (a
// WorkloadPolicy set, changed or deleted, new schemas), after objects
// change (informer events, debounced so a burst of creates is one pass, not
// one per object) and every interval. The interval pass also starts a new
// epoch of the rule-set version: it judges every object again, which is how
// verdicts that depend on other objects (V-TJ-3's runtime, V-PCLQ-1's
// PodCliqueSet, a namespaceSelector's namespace labels) catch up with them.
//
// After each pass the Auditor writes, per WorkloadPolicy, the number of
// violating objects and the first samples into its status (a merge patch of
// those fields only: the compile status every replica writes stays as it
// is); sets the gauge shepherd_audit_violations{rule,kind} to what violates
// now (series of cleared violations are deleted); and turns every violation
// newly found into an audit record of operation AUDIT (a log line and the
// /audit ring; no Event per object). Results are served as JSON
// (Auditor.ServeHTTP, at /audit/violations on the metrics server).
//
// The informers keep each object as its JSON (Object), without
// managedFields, and a pass hands that JSON to the chain, which decodes it
// as it decodes a webhook request: kept decoded, the objects took four
// times the memory, and the typed objects the reconcilers and lookups
// cache cannot stand in for them (their types know only the fields
// shepherd reads; a rule may read any). A rule that reads
// object.metadata.managedFields sees none in the audit. Objects being
// deleted and objects in the namespaces the webhooks exclude (kube-system,
// shepherd's own) are not audited.
package background
