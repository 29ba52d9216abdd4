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
// # Split with package gang
//
// Package gang writes every PodClique's readyReplicas, wasAvailable and
// MinAvailableBreached — for Training too — and this package reads those
// conditions. For a Training PodCliqueSet, gang never deletes anything: the
// restart replaces gang termination at both the PCSG and the PodCliqueSet
// level, so the two never both answer one breach. The effective delay is the
// same as gang's (PCSG override, else the set's terminationDelay), with an
// unset delay meaning 0 (D-PCS-2's default for Training).
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
//     restart number N and the UIDs of the pods it replaces;
//  2. in a later reconcile, one whose cache shows the markers: commit
//     restartCount = N on the PodCliqueSet status (optimistic lock: a
//     restart is counted once), event ReplicaRestarting, metric;
//  3. delete the named pods (UID preconditions);
//  4. once none of the named pods is left and gang has reset the clique
//     (wasAvailable false — gang holds it false while the marker is active
//     and never counts the named pods), mark that clique's marker done.
//
// A replica with an active (not done) marker is "restarting": its breaches
// are not acted on. The done marker stays as history so that, while other
// PodCliques of the replica are still restarting, a finished PodClique is
// not mistaken for one that was never marked (whose current pods would be
// condemned). A crash between any two steps resumes at the step it stopped
// before, so the count stays exact. A PodClique's Succeeded condition is sticky and written
// before anything of this package deletes pods.
//
// Failure (budget exhausted or maxRuntime exceeded) commits phase Failed and
// the Failed condition first and then deletes every pod of the set — the
// reverse of GREP-0285's wording ("all pods are terminated before the phase
// is set") on purpose: deleting first would lose the failure if shepherd
// stopped in between and Grove recreated the pods. A Failed set keeps having
// its pods deleted until none is left.
package training
