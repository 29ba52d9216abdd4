// Package gang implements Grove gang termination (SPEC §6 R-GT, the Grove
// gang-termination design): it keeps each PodClique's readyReplicas, sticky
// wasAvailable and MinAvailableBreached condition, aggregates breaches per
// PodCliqueScalingGroup replica, and terminates a breached PCSG replica or a
// whole PodCliqueSet replica once its terminationDelay has passed.
//
// Three controllers, one per level, each a thin Reconcile around a pure
// decision function given a clock:
//
//   - PodClique (podclique.go): pods → readyReplicas, wasAvailable,
//     MinAvailableBreached. Outcomes in the design's order: SufficientReadyPods,
//     NeverAvailable, UpdateInProgress, InsufficientReadyPods.
//   - PodCliqueScalingGroup (scalinggroup.go): a PCSG replica is breached when
//     any of its PodCliques is; an expired breached replica is terminated by
//     deleting its PodCliques unless the healthy replicas would fall below the
//     PCSG's minAvailable — then the PCSG reports MinAvailableBreached=True and
//     the PodCliqueSet level acts.
//   - PodCliqueSet (podcliqueset.go): a PCS replica with a breached standalone
//     PodClique or breached PCSG past its delay loses every PodClique of that
//     replica index.
//
// Nothing lives in memory: every delay starts at a condition's
// lastTransitionTime and is recomputed at every reconcile, so a restart of
// shepherd loses nothing. The PodCliqueSet level derives a PCSG's breach time
// from the PodCliques' own conditions rather than from the PCSG's condition, so
// a stale PCSG condition can never terminate PodCliques Grove has just
// recreated. Deletions carry UID preconditions and background propagation.
//
// A PodClique being deleted (deletionTimestamp set) is judged by one rule,
// Terminating, at both levels: its replica is already being terminated, so
// its MinAvailableBreached is history — it neither starts nor expires a
// delay, and a PodClique still draining never gets the siblings Grove has
// recreated beside it terminated again — and its replica counts as not
// healthy toward a PCSG's minAvailable, though replicas being terminated
// alone never escalate to the PodCliqueSet level. Only live PodCliques are
// deleted (TestTerminatingPodCliquesBothLevelsAgree).
//
// # Who enforces: never twice
//
// Grove writes MinAvailableBreached and gang-terminates on its own
// (SPEC §9). A Gate sees the sign — a PodClique's or PodCliqueScalingGroup's
// MinAvailableBreached owned, in managedFields, by a field manager other than
// shepherd's (every write here uses api.FieldManager) — and reports it to the
// integrations.Enforcement once. Under the setting auto shepherd then stands
// down for gang termination: it writes no readyReplicas, availableReplicas,
// wasAvailable or MinAvailableBreached, emits no GangTerminated event and
// deletes nothing. Under on it acts as if Grove were absent, under off never.
//
// # Where status goes
//
// wasAvailable is written where the served schema keeps it (the status
// field of the seed schema, else the shepherd.dev/was-available carrier;
// grove.SetWasAvailable) and read from either; a rolling update is read from
// the seed's status.rollingUpdateProgress or Grove's status.updateProgress,
// and a scaling group's terminationDelay override from the seed fields or
// the shepherd.dev/termination-delay carrier — all through
// integrations/grove, never directly.
//
// # Split with package training
//
// A PodCliqueSet of workloadType Training is package training's alone: there
// a breach is answered by a restart (or the Failed phase), detected from the
// pods, and what that package derives lives in the set's WorkloadRecord.
// This package writes nothing on a Training set's PodCliques or scaling
// groups and deletes nothing of it. It still exports the pieces training
// builds on: CliqueAvailability (a pod that exited 0 counts as available
// for Training; the pods a restart marker names never count; wasAvailable
// is held false while a marker is active, so a restarted replica gets the
// startup protection of a new one; a Training clique never yet available
// whose failed pods exceed replicas − minAvailable is breached,
// Availability.FailedBeforeAvailable), RestartMarker, and the pod helpers.
package gang
