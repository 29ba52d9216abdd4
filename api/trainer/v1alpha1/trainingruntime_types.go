package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

// TrainingRuntimeSpec is the spec shared by TrainingRuntime and
// ClusterTrainingRuntime.
type TrainingRuntimeSpec struct {
	// MLPolicy configures the ML framework.
	// +optional
	MLPolicy *MLPolicy `json:"mlPolicy,omitempty"`

	// PodGroupPolicy configures gang scheduling: at most one of coscheduling,
	// volcano and workload (rule V-TR-6).
	// +optional
	PodGroupPolicy *PodGroupPolicy `json:"podGroupPolicy,omitempty"`

	// Template is the JobSet every TrainJob of this runtime runs.
	Template JobSetTemplateSpec `json:"template"`

	// TTLSecondsAfterFinished deletes a finished TrainJob this long after it
	// finished (KEP-2899). Unset: never.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// MLPolicy configures the ML framework of a runtime.
type MLPolicy struct {
	// NumNodes is the default number of training nodes.
	// +optional
	NumNodes *int32 `json:"numNodes,omitempty"`
	// +optional
	Torch *TorchMLPolicySource `json:"torch,omitempty"`
	// +optional
	MPI *MPIMLPolicySource `json:"mpi,omitempty"`
}

// TorchMLPolicySource configures PyTorch distributed training.
type TorchMLPolicySource struct {
	// +optional
	NumProcPerNode *intstr.IntOrString `json:"numProcPerNode,omitempty"`
}

// MPIMLPolicySource configures MPI training; its launcher and nodes share
// one gang.
type MPIMLPolicySource struct {
	// +optional
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`
	// +optional
	MPIImplementation *string `json:"mpiImplementation,omitempty"`
	// +optional
	SSHAuthMountPath *string `json:"sshAuthMountPath,omitempty"`
	// +optional
	RunLauncherAsNode *bool `json:"runLauncherAsNode,omitempty"`
}

// PodGroupPolicy selects a gang-scheduling integration.
type PodGroupPolicy struct {
	// +optional
	Coscheduling *CoschedulingPodGroupPolicySource `json:"coscheduling,omitempty"`
	// +optional
	Volcano *VolcanoPodGroupPolicySource `json:"volcano,omitempty"`
	// Workload uses the Kubernetes Workload API: shepherd creates a Workload
	// and PodGroups and injects schedulingGroup into pod templates (KEP-3015).
	// +optional
	Workload *WorkloadPodGroupPolicySource `json:"workload,omitempty"`
}

// CoschedulingPodGroupPolicySource configures the coscheduling plugin.
type CoschedulingPodGroupPolicySource struct {
	// +optional
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// VolcanoPodGroupPolicySource configures Volcano.
type VolcanoPodGroupPolicySource struct {
	// +optional
	NetworkTopology *NetworkTopology `json:"networkTopology,omitempty"`
}

// NetworkTopology is Volcano's network-topology-aware scheduling.
type NetworkTopology struct {
	// +optional
	Mode string `json:"mode,omitempty"`
	// +optional
	HighestTierAllowed *int32 `json:"highestTierAllowed,omitempty"`
}

// WorkloadPodGroupPolicySource selects the Kubernetes Workload API. It has no
// fields yet.
type WorkloadPodGroupPolicySource struct{}

// JobSetTemplateSpec is the JobSet a runtime stamps out per TrainJob.
type JobSetTemplateSpec struct {
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec jobsetv1alpha2.JobSetSpec `json:"spec,omitempty"`
}

// TrainingRuntime is a namespaced blueprint for TrainJobs.
// +kubebuilder:object:root=true
type TrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TrainingRuntimeSpec `json:"spec,omitempty"`
}

// TrainingRuntimeList is a list of TrainingRuntimes.
// +kubebuilder:object:root=true
type TrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingRuntime `json:"items"`
}

// ClusterTrainingRuntime is a cluster-wide blueprint for TrainJobs.
// +kubebuilder:object:root=true
type ClusterTrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TrainingRuntimeSpec `json:"spec,omitempty"`
}

// ClusterTrainingRuntimeList is a list of ClusterTrainingRuntimes.
// +kubebuilder:object:root=true
type ClusterTrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTrainingRuntime `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TrainingRuntime{}, &TrainingRuntimeList{},
		&ClusterTrainingRuntime{}, &ClusterTrainingRuntimeList{})
}
