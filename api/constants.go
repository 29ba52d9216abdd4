package api

// API groups shepherd serves or watches.
const (
	TrainerGroup    = "trainer.kubeflow.org"
	GroveGroup      = "grove.io"
	JobSetGroup     = "jobset.x-k8s.io"
	ShepherdGroup   = "shepherd.dev"
	SchedulingGroup = "scheduling.k8s.io"
)

// SchedulingVersions are the scheduling.k8s.io versions of the Workload API
// (Workloads and PodGroups, KEP-4671) shepherd reads and writes, most
// preferred first: V-TR-7's discovery and the Workload reconciler's agree
// on them.
var SchedulingVersions = []string{"v1beta1", "v1alpha3", "v1alpha2"}

// Kinds, as they appear in ownerReferences and runtimeRefs.
const (
	KindTrainJob               = "TrainJob"
	KindTrainingRuntime        = "TrainingRuntime"
	KindClusterTrainingRuntime = "ClusterTrainingRuntime"
	KindJobSet                 = "JobSet"
	KindPodCliqueSet           = "PodCliqueSet"
	KindPodClique              = "PodClique"
	KindPodCliqueScalingGroup  = "PodCliqueScalingGroup"
	KindWorkload               = "Workload"
	KindPodGroup               = "PodGroup"
	KindWorkloadPolicy         = "WorkloadPolicy"
)

// DefaultNamespace is the namespace shepherd is installed in by default
// (deploy/default). Its webhooks, and the policies it exports, never apply
// there nor in SystemNamespace, so a broken shepherd cannot block its own
// recovery or the control plane.
const (
	DefaultNamespace = "shepherd-system"
	SystemNamespace  = "kube-system"
)

// FieldManager is the field manager of every write shepherd makes.
const FieldManager = "shepherd"

// Grove's labels on PodCliques, PodCliqueScalingGroups and Pods.
const (
	LabelPartOf                       = "app.kubernetes.io/part-of"
	LabelPodCliqueSetReplicaIndex     = "grove.io/podcliqueset-replica-index"
	LabelPodCliqueScalingGroup        = "grove.io/podcliquescalinggroup"
	LabelPodCliqueScalingGroupReplica = "grove.io/podcliquescalinggroup-replica-index"
	LabelPodClique                    = "grove.io/podclique"
)

// Kubeflow Trainer's labels.
const (
	// LabelTrainJobAncestorStep marks which step of a TrainJob a replicatedJob
	// runs: dataset-initializer, model-initializer or trainer.
	LabelTrainJobAncestorStep = "trainer.kubeflow.org/trainjob-ancestor-step"

	AncestorDatasetInitializer = "dataset-initializer"
	AncestorModelInitializer   = "model-initializer"
	AncestorTrainer            = "trainer"
)

// Workload PodGroup template names (KEP-3015).
const (
	PodGroupTemplateTrainer     = "trainer"
	PodGroupTemplateInitializer = "initializer"
)

// TrainJob condition types and reasons (KEP-2899, KEP-3015).
const (
	TrainJobSuspended = "Suspended"
	TrainJobComplete  = "Complete"
	TrainJobFailed    = "Failed"
	// TrainJobWorkloadReady, a condition of the TrainJob's WorkloadRecord
	// (never of the TrainJob), reports whether shepherd could create the
	// TrainJob's Workload and PodGroups.
	TrainJobWorkloadReady = "WorkloadReady"

	ReasonSuspended              = "Suspended"
	ReasonResumed                = "Resumed"
	ReasonDeadlineExceeded       = "DeadlineExceeded"
	ReasonWorkloadCreated        = "WorkloadCreated"
	ReasonWorkloadAPIUnavailable = "WorkloadAPIUnavailable"
	// ReasonWorkloadNotOwned (also the Warning Event's reason): a Workload
	// or PodGroup of the name shepherd would create exists and is not
	// controlled by the TrainJob; shepherd neither adopts nor deletes it.
	ReasonWorkloadNotOwned = "WorkloadNotOwned"
	EventWorkloadNotOwned  = "WorkloadNotOwned"

	MessageDeadlineExceeded = "TrainJob exceeded its active deadline"
)

// Grove condition types and reasons (gang termination, GREP-0285).
const (
	ConditionMinAvailableBreached = "MinAvailableBreached"
	ConditionSucceeded            = "Succeeded"
	ConditionFailed               = "Failed"

	ReasonSufficientReadyPods   = "SufficientReadyPods"
	ReasonNeverAvailable        = "NeverAvailable"
	ReasonUpdateInProgress      = "UpdateInProgress"
	ReasonInsufficientReadyPods = "InsufficientReadyPods"
	ReasonAllPodsSucceeded      = "AllPodsSucceeded"
	ReasonMaxRestartsExceeded   = "MaxRestartsExceeded"
	ReasonMaxRuntimeExceeded    = "MaxRuntimeExceeded"
)

// Event reasons.
const (
	EventDeadlineExceeded     = "DeadlineExceeded"
	EventTTLExpired           = "TTLExpired"
	EventWorkloadCreated      = "WorkloadCreated"
	EventWorkloadAPIMissing   = "WorkloadAPIUnavailable"
	EventGangTerminated       = "GangTerminated"
	EventPodCliqueFailed      = "PodCliqueFailed"
	EventReplicaRestarting    = "ReplicaRestarting"
	EventMaxRestartsExceeded  = "MaxRestartsExceeded"
	EventMaxRuntimeExceeded   = "MaxRuntimeExceeded"
	EventWorkloadSucceeded    = "WorkloadSucceeded"
	EventPolicyViolation      = "PolicyViolation"
	EventStartupPolicyRewrote = "StartupPolicyRewritten"

	// EventInvalidKnob (Warning, on the object carrying it): a knob's
	// stored value does not parse (a carrier written before shepherd's
	// admission rules ran); the reconciler acts as if it were unset.
	EventInvalidKnob = "InvalidKnob"
)

// Training restarts (integrations/grove/training).
const (
	// AnnotationRestart marks a PodClique of a Training replica whose restart
	// shepherd has begun: the restart number and the UIDs of the pods it
	// replaces. It is shepherd's durable record of a restart in flight.
	AnnotationRestart = "shepherd.dev/restart"
)

// WorkloadPolicy status: Ready is True when the policy compiled and is
// enforced, False with reason CompileError when it is not applied at all.
const (
	ConditionPolicyReady = "Ready"
	ReasonPolicyCompiled = "Compiled"
	ReasonCompileError   = "CompileError"
	// ReasonTooManyPolicies: the replicas already compile as many
	// policies as --max-workload-policies allows.
	ReasonTooManyPolicies = "TooManyPolicies"
)

// AuditOperation is the operation of an audit record (webhook/audit) of a
// stored object that the background audit found violating a rule, beside
// the CREATE and UPDATE of admission verdicts: nobody made a request, the
// object was judged as a create of it as it is stored.
const AuditOperation = "AUDIT"

// Serving certificates (self-signed mode): annotations on the certificate
// Secret. Set a rotate-* annotation to any new value to force a rotation;
// shepherd copies the value to the matching rotated-* annotation once done.
const (
	AnnotationRotateCA           = "shepherd.dev/rotate-ca"
	AnnotationRotatedCA          = "shepherd.dev/rotated-ca"
	AnnotationRotateServingCert  = "shepherd.dev/rotate-serving-cert"
	AnnotationRotatedServingCert = "shepherd.dev/rotated-serving-cert"
)

// Serving certificate event reasons (on the certificate Secret).
const (
	EventCARotated             = "CARotated"
	EventServingCertRotated    = "ServingCertificateRotated"
	EventCABundleInjected      = "CABundleInjected"
	EventCertificateSecretMade = "CertificateSecretCreated"
)

// Carriers (docs/concepts.md, "Carriers: seed knobs in shepherd.dev/
// annotations"): where a seed knob lives on an upstream object whose
// served schema lacks the seed field — an annotation on the same object
// named shepherd.dev/ + the field's name in kebab case. integrations/knob
// is the one place that reads and writes them.
const (
	AnnotationTTLSecondsAfterFinished = "shepherd.dev/ttl-seconds-after-finished"
	AnnotationPodGroupPolicy          = "shepherd.dev/pod-group-policy"
	AnnotationWorkloadType            = "shepherd.dev/workload-type"
	AnnotationMaxRestarts             = "shepherd.dev/max-restarts"
	AnnotationMaxRuntime              = "shepherd.dev/max-runtime"
	// AnnotationTerminationDelay carries the scaling groups' terminationDelay
	// overrides on a PodCliqueSet: "group=duration" pairs joined by commas.
	AnnotationTerminationDelay = "shepherd.dev/termination-delay"

	// PodGroupPolicyWorkload is the value of AnnotationPodGroupPolicy that
	// stands for podGroupPolicy.workload.
	PodGroupPolicyWorkload = "workload"
)

// Status carriers: what shepherd keeps on an upstream object whose schema
// has no field for it.
const (
	// AnnotationWasAvailable is set to "true" on a PodClique once it has
	// been available (Grove's PodClique status has no wasAvailable).
	AnnotationWasAvailable = "shepherd.dev/was-available"
	// Training PodCliqueSet status (Grove's status has no phase,
	// restartCount or startTime of a Training workload).
	AnnotationTrainingPhase = "shepherd.dev/phase"
	AnnotationRestartCount  = "shepherd.dev/restart-count"
	AnnotationStartTime     = "shepherd.dev/start-time"
)

// OpenReports (openreports.io) written by the audit of stored objects when
// the cluster serves their CRDs: one Report per namespace and one
// ClusterReport for cluster-scoped kinds, each named ReportName and
// labelled LabelManagedBy=FieldManager so shepherd finds (and deletes) only
// its own.
const (
	ReportName     = "shepherd-audit"
	ReportSource   = "shepherd"
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// WorkloadPolicies are validated at apply by the webhook of this name
// (deploy/webhook/webhooks.yaml), except those labelled
// LabelApplyUnchecked=true: a policy applied ahead of its kind's CRD, whose
// status reports the compile errors until the CRD is served.
const (
	PolicyWebhookName   = "workloadpolicies.validate.shepherd.dev"
	LabelApplyUnchecked = "shepherd.dev/apply-unchecked"
)
