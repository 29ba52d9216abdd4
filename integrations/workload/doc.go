// Package workload creates the Kubernetes Workload and PodGroups that
// gang-schedule a TrainJob whose runtime sets podGroupPolicy.workload (rule
// family R-WL, Kubeflow Trainer KEP-3015). Trainer's runtime CRD has no such
// field; there the runtime carries the annotation
// shepherd.dev/pod-group-policy: workload, and integrations/trainer
// (UsesWorkload) reads either form.
//
// One Workload named after the TrainJob lists the podGroupTemplates the
// runtime needs ("trainer": a gang of numNodes pods, an MPI launcher sharing
// it with its nodes; "initializer": basic, when the runtime has dataset or
// model initializers), and one PodGroup per template carries the name the
// webhook injects into pod templates (api.PodGroupName). The
// scheduling.k8s.io version (v1beta1, else v1alpha3, else v1alpha2) comes
// from serve's Workload API probe (integrations.WorkloadAPIProbe), which
// repeats discovery periodically; without one, from discovery at each
// reconcile. The objects are built as
// unstructured so one code path serves them all. Creation is
// create-if-missing, so reconciles are idempotent; suspension leaves the
// objects alone and deletion is the garbage collector's, through the
// ownerReferences set here. What to create is decided by pure functions
// (plan.go, objects.go, owned.go); controller.go applies it.
//
// Workloads and PodGroups are watched (once a reconcile has discovered the
// version served): deleting one enqueues the TrainJob that controls it, so
// a deleted PodGroup is recreated at once rather than at the next TrainJob
// change or resync. Only deletions are watched; creations are shepherd's
// and status is the scheduler's.
//
// Ownership, not the name, decides whose object it is. A Workload or
// PodGroup of the name shepherd would create that is not controlled (by
// ownerReference UID) by the TrainJob — typically the Workload of an
// earlier TrainJob of the same name the garbage collector has yet to
// remove — is never adopted or changed: the TrainJob's WorkloadRecord gets WorkloadReady=False
// reason WorkloadNotOwned and a Warning Event, and the reconcile stops with
// a terminal error instead of retrying. The Workload's deletion (matched to
// the TrainJob of its name) enqueues the job again.
//
// A change to the runtime, or to the TrainJob's numNodes, does not reach a
// Workload and PodGroups that exist: they are created once, from the
// runtime as it was then, and never updated. That is intended: changing a
// runtime must not retro-apply to running jobs (KEP-2899 lists this as a
// non-goal), and a gang's minCount changing under pods already scheduled against it would
// break the gang. The runtime watch exists for jobs whose objects do not
// exist yet (a runtime created, or switched to the Workload API, after the
// TrainJob).
package workload
