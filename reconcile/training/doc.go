// Package training implements GREP-0285 Training workloads (SPEC §6 R-TR) for
// PodCliqueSets of workloadType Training: the phase (Pending → Running →
// Succeeded | Failed), startTime, the restart budget (maxRestarts), the
// runtime limit (maxRuntime), the PodClique Succeeded condition, and the
// GREP's events. Failed and Succeeded are final.
//
// Shape: thin reconcilers around pure decisions given a clock
// (podclique.go: Succeeded; workload.go: everything at PodCliqueSet level),
// then status patches of shepherd's fields only (optimistic-lock merge
// patches), restart markers, deletes with UID preconditions, events, metrics.
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
// is not a breached one). For a Training PodClique this package keeps it —
// the status field where the served schema has one, else the
// shepherd.dev/was-available carrier (grove.SetWasAvailable) — in every
// mode, since Grove never keeps it; package gang keeps it for Inference
// cliques only. Package gang still writes a Training clique's readyReplicas
// and MinAvailableBreached when it enforces gang termination, and never
// deletes anything of a Training PodCliqueSet: the restart replaces gang
// termination at both the PCSG and the PodCliqueSet level, so the two never
// both answer one breach.
//
// The Training status (phase, restartCount, startTime) goes where the served
// schema keeps it: the seed's status fields, or, on Grove's schema, the
// carriers shepherd.dev/phase, shepherd.dev/restart-count and
// shepherd.dev/start-time (grove.SetTrainingStatus); the Failed condition
// goes to status.conditions, which both schemas have.
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
// # Restarts without memory
//
// A restart deletes every pod of every PodClique in the PodCliqueSet replica.
// The recreated pods must get the same startup protection as a new gang, or
// the cliques whose healthy pods were deleted would read as freshly breached
// (their wasAvailable is sticky) and restart again. So a restart runs as
// steps whose state is all in the API:
//
//  1. mark every PodClique of the replica with api.AnnotationRestart: the
//     restart number N, the UIDs of the pods it replaces, and failed=true on
//     the cliques whose breach caused it. N is one more than the highest of
//     restartCount and every marker of every replica (done or not), so a
//     restart marked but not yet committed is never numbered twice; when
//     that highest number has reached maxRestarts, a breach fails the set
//     instead. One restart is marked per reconcile; another breached
//     replica waits (no event) for the next;
//  2. in a later reconcile, one whose cache shows the markers: commit
//     restartCount = N on the PodCliqueSet status (optimistic lock: a
//     restart is counted once); only after the commit, the events —
//     PodCliqueFailed for each clique marked failed, ReplicaRestarting —
//     and the metric, so each is emitted once per restart number. Every
//     replica's restart in flight is continued and committed before any new
//     breach is considered;
//  3. delete the named pods (UID preconditions);
//  4. once every named pod is gone or terminating (deletionTimestamp set)
//     and the clique's wasAvailable is reset (this package's clique
//     controller holds it false while the marker is active and never counts
//     the named pods), mark that clique's marker done. A pod that stays
//     Terminating (a lost node) does not hold the restart open: it counts
//     for nothing (not ready, not succeeded — the Succeeded decision skips
//     the pods of the last marker, done or not), and the replica's next
//     breach is acted on.
//
// On Grove's schema the count lives in an annotation: step 2 is then a
// merge patch of the annotations, under the same optimistic lock. A replica
// with an active (not done) marker is "restarting": its breaches are not
// acted on. The done marker stays as history so that, while other
// PodCliques of the replica are still restarting, a finished PodClique is
// not mistaken for one that was never marked (whose current pods would be
// condemned), and so that the next restart is numbered after it. A crash
// between any two steps resumes at the step it stopped before, so the count
// stays exact. Crash points the tests cover: between marking and the commit,
// with another replica failing meanwhile (TestTrainingTwoBreachesBudgetOne
// in test/grove; TestDecideIssue19 "defect 1"); between two cliques' marks
// (step 2 marks the rest: TestRestartResumesAfterPartialMarking); after the
// commit, before the deletes or the done markers (TestDecide "restart in
// flight", TestDecideIssue19 "defect 3");
// shepherd stopped between restarts and while pods started
// (TestTrainingShepherdRestartedMidway, TestTrainingStartTimeFromPods). A
// PodClique's Succeeded condition is sticky and written before anything of
// this package deletes pods.
//
// Failure (budget exhausted or maxRuntime exceeded) commits phase Failed and
// the Failed condition first and then deletes every pod of the set — the
// reverse of GREP-0285's wording ("all pods are terminated before the phase
// is set") on purpose: deleting first would lose the failure if shepherd
// stopped in between and Grove recreated the pods. A Failed set keeps having
// its pods deleted until none is left.
package training
