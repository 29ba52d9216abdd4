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
// For a PodCliqueSet of workloadType Training this package still writes every
// PodClique's readyReplicas and MinAvailableBreached and every PCSG's status
// (when it enforces), but never deletes anything of a Training PodCliqueSet —
// there a breach is answered by a restart (or the Failed phase), owned by
// package training, which detects breaches from the pods itself. A Training
// clique's wasAvailable is package training's to write: it is the restart
// gate and must be kept even when Grove enforces gang termination. Two things
// of training's are honoured here: a pod that exited 0 counts as available (a
// worker that finished is not a lost worker), and a PodClique carrying an
// active api.AnnotationRestart marker is being restarted: the pods the marker
// names do not count (nor, once it is done, those of the last marker,
// which may linger in Terminating), and wasAvailable is held false until
// the marker is done, so the restarted replica gets the same startup
// protection as a new one. That protection is for pods slow to start, not
// for pods that failed: a Training clique never yet available whose failed
// pods exceed replicas − minAvailable is breached
// (Availability.FailedBeforeAvailable). Package training writes the PodClique Succeeded condition; both
// packages write status with optimistic-lock merge patches that carry the
// whole conditions list as read, so neither drops the other's condition.
package gang
