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
// scheduling.k8s.io version is found by discovery at each reconcile
// (v1beta1, else v1alpha3, else v1alpha2), and the objects are built as
// unstructured so one code path serves them all. Creation is
// create-if-missing, so reconciles are idempotent; suspension leaves the
// objects alone and deletion is the garbage collector's, through the
// ownerReferences set here. What to create is decided by pure functions
// (plan.go, objects.go); controller.go applies it.
package workload
