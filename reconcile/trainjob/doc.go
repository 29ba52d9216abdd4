// Package trainjob enforces a TrainJob's lifecycle limits (rule family R-TJ,
// Kubeflow Trainer KEP-2899): spec.activeDeadlineSeconds fails a job that runs
// too long and deletes its JobSet; the runtime's ttlSecondsAfterFinished
// deletes a finished job. Trainer's runtime CRD has no ttlSecondsAfterFinished;
// there the runtime carries it in the annotation
// shepherd.dev/ttl-seconds-after-finished, and integrations/trainer
// (RuntimeTTLOf) reads either form.
//
// Trainer v2.2+ enforces activeDeadlineSeconds itself. shepherd never
// enforces anything twice (SPEC §9): when its integrations.Enforcement says
// the deadline is Trainer's (setting auto with Trainer's TrainJob schema
// served, or off), the controller writes no Failed condition, emits no
// Event and deletes no JobSet for the deadline. The TTL is always
// shepherd's: Trainer has none.
//
// The controller holds no timers: every reconcile recomputes the deadline and
// the TTL expiry from the TrainJob's timestamps and conditions and the
// runtime's spec (SPEC §2), acts on what has expired — including what expired
// while shepherd was down — and requeues at the next expiry. The decisions
// are pure functions of the objects and a clock (deadline.go, ttl.go); the
// controller (controller.go) only reads, applies with patches and deletes
// with preconditions, then records events and metrics.
package trainjob
