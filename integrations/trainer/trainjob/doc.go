// Package trainjob enforces a TrainJob's lifecycle limits (rule family R-TJ,
// Kubeflow Trainer KEP-2899): spec.activeDeadlineSeconds fails a job that runs
// too long and deletes its JobSet; the runtime's ttlSecondsAfterFinished
// deletes a finished job. Trainer's runtime CRD has no ttlSecondsAfterFinished;
// there the runtime carries it in the annotation
// shepherd.dev/ttl-seconds-after-finished, and integrations/trainer
// (RuntimeTTLOf) reads either form.
//
// Trainer v2.2+ enforces activeDeadlineSeconds itself. shepherd never
// enforces anything twice (docs/concepts.md, "Who enforces what"): when its
// integrations.Enforcement says the deadline is Trainer's (setting auto with
// Trainer's TrainJob schema served, or off), the controller writes no Failed
// condition, emits no Event and deletes no JobSet for the deadline. The TTL
// is always shepherd's: Trainer has none.
//
// # When the clocks start
//
// The deadline counts from the job's last resume, as a Kubernetes Job's
// activeDeadlineSeconds does, and exactly as Trainer v2.3.0 computes it
// (pkg/controller/trainjob_controller.go, reconcileDeadline), so that the
// verdict does not depend on which of the two enforces: from the
// lastTransitionTime of Suspended=False/Resumed — the resume as Trainer
// records it (Trainer reads any Suspended=False and writes it only with
// reason Resumed) — else from creationTimestamp; no timer runs while the
// job is suspended (spec.suspend, or Trainer still reporting
// Suspended=True).
// A job created suspended therefore starts at its first resume. Trainer
// records that resume; a resume nobody recorded (no Suspended condition at
// all, i.e. no Trainer writing TrainJob status) counts from creation, as it
// does in Trainer (TestDecideDeadline, TestCreatedSuspendedJobStartsAtFirstResume).
//
// The TTL counts from the job's finish, or from when the runtime's TTL
// took its value if that is later (DecideTTL, TTLSince): a TTL added to a
// runtime, or shortened, must not delete every job that finished before at
// once (KEP-2899 lists retro-applying new defaults as a non-goal). When
// the TTL was set is read from the runtime's own managedFields — the
// latest time of an entry owning the field or its carrier annotation — so
// it is object state: a shepherd restarted in between derives the same
// expiry, and nothing is written to remember it. That time moves when the
// same field manager changes anything else on the runtime, which only
// keeps jobs longer, never deletes one early; a runtime whose
// managedFields were stripped counts from its creation
// (TestTTLSince, TestTTLAddedLaterCountsFromWhenItWasSet).
//
// The controller holds no timers: every reconcile recomputes the deadline and
// the TTL expiry from the TrainJob's timestamps and conditions and the
// runtime's spec, acts on what has expired — including what expired
// while shepherd was down — and requeues at the next expiry. The decisions
// are pure functions of the objects and a clock (deadline.go, ttl.go); the
// controller (controller.go) only reads, applies with patches and deletes
// with preconditions, then records events and metrics.
//
// # The record
//
// What the controller derives is written to the TrainJob's WorkloadRecord
// (record.go, package record), never to the TrainJob: the job's phase as
// its conditions say, its deadline (when it falls, and whether shepherd or
// Trainer enforces it) and its TTL (when shepherd deletes it) — one
// server-side apply under this controller's field manager when any of them
// changes, none otherwise. The Workload controller applies its own part
// (the PodGroups) to the same record under its manager.
package trainjob
