// Package training implements GREP-0285 Training workloads (rule family
// R-TR; docs/architecture.md, "Reconcilers and the background audit") for
// PodCliqueSets of workloadType Training: the phase (Pending → Running →
// Succeeded | Failed), startTime, the restart budget (maxRestarts), the
// runtime limit (maxRuntime), the PodClique Succeeded condition, and the
// GREP's events. Failed and Succeeded are final.
//
// Shape: read → one pure decision of (objects, record, clock) → one write →
// events. The PodCliqueSet controller lists the set's PodCliques,
// PodCliqueScalingGroups and pods and reads the set's WorkloadRecord;
// Decide (workload.go) returns the one write to make — the record (the
// Training status, one PodClique's restart marker, or the PodCliques'
// wasAvailable and Succeeded), a batch of pod deletes, or the scale-down of
// a failed set — and the events and metrics of a status write go out only
// once it has landed. The watch events of that write (the record's too)
// bring the next reconcile, which decides the next write.
//
// # State: the set's WorkloadRecord, never the Grove objects
//
// Everything this package derives is kept in the set's WorkloadRecord
// (state.go, package record), which only this controller writes: the
// phase, restartCount, startTime and Failed condition, and per PodClique
// the sticky wasAvailable bit, Succeeded, and the last restart marker.
// None of it goes on the PodCliqueSet or its PodCliques: Grove's
// PodCliqueSet and scaling-group controllers replace a PodClique's
// annotations with the template's on every reconcile (Grove fcc3b3b,
// components/podclique buildResource), which wiped the earlier carriers
// within seconds. A set without a record is read once from where an
// earlier shepherd kept its state (Upgrade: the seed fields or the
// carriers, was-available and shepherd.dev/restart), so an upgrade in the
// middle of a restart loses nothing.
//
// # Breach detection: from the pods, at once
//
// A Training breach is read from the pods, not from MinAvailableBreached: per
// PodClique, gang.CliqueAvailability — the Grove design's rule (ready pods,
// plus pods that exited 0, below minAvailable after the clique had been
// available) — evaluated here on the pods this package lists. Whoever writes
// MinAvailableBreached (package gang, or Grove itself when it enforces gang
// termination, integrations.FeatureGangTermination) does not matter, and
// neither do Grove's own breach rules.
//
// The startup protection (no breach before the clique was available) is
// for pods that are slow to start, not for pods that failed: a Training
// clique never yet available in which more pods failed (phase Failed, or a
// container exited non-zero — restartPolicy Never, so nothing brings them
// back) than replicas − minAvailable allows is breached too
// (gang.Availability.FailedBeforeAvailable). GREP-0285 says a failure fails
// the job: such a crash uses the restart budget, or fails the set, like any
// breach (TestDecideIssue19 "defect 9a", TestTrainingCrashBeforeAvailable).
// The pods a restart replaced never count, even lingering in Terminating.
//
// The delay is 0, whatever the PodCliqueSet's terminationDelay says: a
// breach is answered by a restart, or the Failed phase, in the reconcile
// that sees it. GREP-0285 defaults a Training delay to 0 (D-PCS-2), but on a
// cluster running Grove that value cannot be stored: Grove's webhook
// defaults terminationDelay to 4h and rejects 0, and on a Grove schema one
// cannot tell the user's value from Grove's default. Acting at once also
// keeps Grove's gang termination, which does not know Training workloads,
// from ever firing on one: the restart replaces the breached pods hours
// before Grove's delay runs out. (A framework that tolerates brief pod gaps
// must say so with minAvailable.)
//
// The availability rule needs the sticky wasAvailable bit (a starting gang
// is not a breached one). For a Training PodClique this package keeps it in
// the record, in every mode, since Grove never keeps it. Package gang
// writes nothing for a Training PodCliqueSet — neither its PodCliques'
// status nor its scaling groups' — and never deletes anything of it: the
// restart replaces gang termination at both the PCSG and the PodCliqueSet
// level, so the two never both answer one breach.
//
// # What belongs to a set: ownership
//
// The controller finds candidates by Grove's part-of label; Decide keeps
// only what the set controls: a PodClique whose controller ownerReference is
// the set's UID or the UID of a PodCliqueScalingGroup the set controls, and a
// pod whose controller ownerReference is one of those PodCliques' UIDs. The
// objects of a deleted set of the same name (garbage collection is
// asynchronous) neither start, breach, nor restart the new set, and a Failed
// set deletes only its own pods.
//
// # startTime
//
// startTime is when the set's pods started, not when shepherd noticed: the
// earliest status.startTime (the kubelet's) of the set's started pods, never
// later than now, and now only when no started pod has one. A set first
// reconciled 2 h after its pods started (shepherd was down) with a 1 h
// maxRuntime fails at once. It is written once and never reset.
//
// # Restarts: one write per reconcile
//
// A restart deletes every pod of every PodClique in the PodCliqueSet replica.
// The recreated pods must get the same startup protection as a new gang, or
// the cliques whose healthy pods were deleted would read as freshly breached
// (their wasAvailable is sticky) and restart again. So a restart is a
// sequence of writes, each decided afresh from the objects by Decide, in
// this order of precedence:
//
//  1. mark: a breach in a replica with no restart in flight is restart
//     N = 1 + the highest of restartCount and every marker of every replica
//     (done or not); with N > maxRestarts the set fails instead. Each
//     PodClique of the replica gets a marker in the record {restart N, the
//     UIDs of its pods now, failed on those whose breach caused it} — one
//     PodClique per write, the first write deciding the restart, the next
//     ones completing it. Another breached replica waits for the next
//     restart, without an event;
//  2. commit: once every PodClique of the replica carries marker N, the
//     status write restartCount = N (with any phase/startTime change), and
//     only after it landed PodCliqueFailed for the cliques marked failed,
//     ReplicaRestarting and the metric — so each is emitted at most once
//     per restart number;
//  3. delete the pods the markers name that are not already terminating
//     (UID preconditions);
//  4. done: once a PodClique's named pods are gone or terminating and its
//     wasAvailable is reset (DecideClique, part of the set's decision,
//     holds it false while the marker is active and never counts the
//     named pods),
//     its marker is rewritten with done set — keeping the pod UIDs, so
//     those pods never count again, even lingering in Terminating on a
//     lost node.
//
// A replica with an active (not done) marker is "restarting": its breaches
// are not acted on. The done marker stays as history, so that the next
// restart is numbered after it and a finished PodClique is not mistaken
// for one never marked.
//
// Why a crash loses nothing: every write is guarded — the record by the
// resourceVersion the decision read, or by create for its first write (an
// optimistic lock: a decision made on a stale cache is refused with a
// Conflict or AlreadyExists and decided again), deletes by UID
// preconditions — and every decision is a function of the objects and the
// record alone. A crash between any two writes leaves objects from
// which the next reconcile decides the write that was next; the restart
// was decided by its first marker and is counted by the one status write
// that moves restartCount to N, which a replay cannot repeat. Events are at
// most once: a crash between a status write and its events loses them,
// never doubles them. TestRestartCrashPoints replays a reference run (two
// markers, the commit, the delete, two done markers; and a failure) after
// each write, both as a crash before the write's events and as the same
// write decided again on a cache that has not seen it, from a set whose
// earlier state was in the seed fields and from one whose state was in
// Grove's carriers (the upgrade); each ends in the reference's state with
// no event twice. The integration tests cover a shepherd stopped between
// the marker and the commit with another replica failing meanwhile
// (TestTrainingTwoBreachesBudgetOne), between restarts and while pods
// started (TestTrainingShepherdRestartedMidway, TestTrainingStartTimeFromPods).
// A PodClique's Succeeded is sticky and recorded before anything of this
// package deletes pods.
//
// Failure (budget exhausted or maxRuntime exceeded) commits phase Failed and
// the Failed condition first — the reverse of GREP-0285's wording ("all pods
// are terminated before the phase is set") on purpose: terminating first
// would lose the failure if shepherd stopped in between — and then ends the
// pods through their owner: every PodClique of the set is scaled to 0
// replicas (a merge patch of spec.replicas with a UID precondition, what an
// autoscaler does). Grove keeps an existing PodClique's replicas when it
// syncs the set's template (it leaves them to autoscalers), so its
// PodClique controller deletes the pods and creates none; deleting the pods
// instead made Grove recreate them at once, in a loop (issue 30: 188
// creates and 186 deletes in 8 s). Pods still there ownerGrace after the
// failure have no controller looking after them and are deleted by
// shepherd. The set and its PodCliques stay until the user deletes them.
package training
