// Package updatefilter keeps, in shepherd's own webhook configurations, the
// matchCondition that spares the webhooks the UPDATEs that change nothing
// any active rule reads.
//
// Operators update the objects shepherd admits all the time without
// touching what it judges: a finalizer added or removed, an owner
// reference, managed fields. Each such UPDATE would otherwise be two TLS
// round trips through the apiserver (mutating and validating) that cannot
// change a verdict. The condition is derived from the active rules
// (celrules.Engine.UpdateReads): an UPDATE reaches the webhooks only when it
// changes a region of the object some rule, WorkloadPolicy or Go check
// reads. When a rule reads the request itself (its user, dryRun) or the
// whole object, no condition is kept and every UPDATE is sent. The leader
// re-derives it whenever the rule set changes.
//
// What this changes, and why it is opt-in (serve --skip-unread-updates): an
// object stored before a rule existed that breaks it can still get its
// finalizers removed (the operators' metadata-only UPDATEs are not judged),
// where the exported ValidatingAdmissionPolicy, native mode and `shepherd
// check` deny them. Such objects are what the background audit reports.
package updatefilter
