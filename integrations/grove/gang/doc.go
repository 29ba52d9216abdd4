// Package gang implements Grove gang termination for PodCliqueSets of
// workloadType Inference (rule family R-GT, the Grove gang-termination
// design; docs/architecture.md, "Reconcilers and the background audit"): a
// PodClique that was available and fell below minAvailable is breached; a
// breached PodCliqueScalingGroup replica is terminated by deleting its
// PodCliques once its terminationDelay has passed, unless the
// group's healthy replicas are below its minAvailable — then the group is a
// breach of its PodCliqueSet replica, and every PodClique of that replica
// goes once a breach outlasted its delay. Grove, which owns the PodCliques,
// makes them again.
//
// One controller, per PodCliqueSet (controllers.go): read the set, its
// PodCliques, scaling groups and pods, and its WorkloadRecord; one pure
// decision of those and the clock (Decide, podcliqueset.go); one write —
// the record, or the deletions — then Events. What it derives lives in the
// set's WorkloadRecord, never on Grove's objects (Grove rewrites PodClique
// annotations and status on every reconcile, issue 30): per PodClique its
// sticky wasAvailable and the start of its breach, and who enforces. Every
// delay runs from a breach start kept there, so a restart of shepherd
// loses nothing. Deletions carry UID preconditions and background
// propagation.
//
// A PodClique being deleted (deletionTimestamp set) is judged by one rule,
// Terminating, at both levels: its replica is already being terminated, so
// its breach is history — it neither starts nor expires a delay, and a
// PodClique still draining never gets the siblings Grove has recreated
// beside it terminated again — and its replica counts as not healthy toward
// a PCSG's minAvailable, though replicas being terminated alone never
// escalate to the PodCliqueSet level. Only live PodCliques are deleted
// (TestTerminatingPodCliquesBothLevelsAgree).
//
// # Who enforces: never twice, per set
//
// Grove writes MinAvailableBreached on PodCliques and scaling groups and
// gang-terminates on its own. shepherd writes that condition nowhere, so
// one owned by another field manager (GroveSign) shows that Grove governs
// the set. Under the setting auto shepherd then stands down for that set —
// its record says Grove enforces, and shepherd derives, deletes and emits
// nothing for it; a set Grove does not write is shepherd's. Under on
// shepherd enforces every set, yet exactly one actor deletes a gang: an
// expired breach Grove too would act on no later than shepherd (its
// MinAvailableBreached on a victim, from the set's delay, within
// groveMargin) is left to Grove for groveGrace. Under off the controller
// does nothing.
//
// Where Grove enforces, its breach rules apply, which differ from the
// design's (docs/concepts.md lists how): a gang with too few pods scheduled
// is breached even if never available (Grove then leaves a never-scheduled
// one alone, WasPCLQEverScheduled), and pods count by their conditions,
// not their phase. Where shepherd enforces, the design's rules apply, read
// from the pods (CliqueAvailability).
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
