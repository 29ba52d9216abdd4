// Package updatefilter keeps, in shepherd's own webhook configurations, the
// matchConditions that spare the webhooks requests they cannot judge: the
// UPDATEs that change nothing any active rule reads, and (WorkConditionName)
// whole kinds and operations on which nothing in force works — where the
// CRD or an upstream webhook enforces every rule, shepherd is not called.
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
// It changes no verdict: every rule is evaluated on UPDATE only when the
// update changes what that rule reads (celrules.UpdateConditionName, in
// shepherd's engine, `shepherd check` and the exported policies alike), and
// the Go checks only when it changes what they read (celrules.GoReads); the
// configurations' condition is the union of those, so the UPDATEs it keeps
// from the webhooks are ones they would admit unjudged. It is on by
// default (serve --skip-unread-updates=false removes it).
//
// The has-work condition changes no verdict either: it keeps away only
// requests for which the chain has no enabled defaulter (mutating) or no
// active rule, WorkloadPolicy or Go check (validating), as
// webhook.Chain.HasWork decides them; a policy added for such a kind brings
// its calls back when the leader re-derives the condition
// (serve --skip-requests-without-work=false removes it).
package updatefilter
