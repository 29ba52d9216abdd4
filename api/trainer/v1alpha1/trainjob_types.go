package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TrainJobSpec is the desired state of a TrainJob.
type TrainJobSpec struct {
	// RuntimeRef names the TrainingRuntime or ClusterTrainingRuntime the job
	// runs on.
	RuntimeRef RuntimeRef `json:"runtimeRef"`

	// Initializer configures the dataset and model initializers.
	// +optional
	Initializer *Initializer `json:"initializer,omitempty"`

	// Trainer overrides the runtime's trainer.
	// +optional
	Trainer *Trainer `json:"trainer,omitempty"`

	// Suspend suspends the job; the active deadline does not run while
	// suspended and restarts in full on resume.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// ActiveDeadlineSeconds is the longest the job may run, counted from
	// creation or from the last resume. At least 1 (rule V-TJ-1); immutable
	// (V-TJ-2).
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
}

// RuntimeRef references a training runtime.
type RuntimeRef struct {
	// Name of the runtime.
	Name string `json:"name"`

	// APIGroup of the runtime, trainer.kubeflow.org.
	// +optional
	APIGroup *string `json:"apiGroup,omitempty"`

	// Kind of the runtime: TrainingRuntime or ClusterTrainingRuntime.
	// +optional
	Kind *string `json:"kind,omitempty"`
}

// Initializer configures a TrainJob's initializers.
type Initializer struct {
	// +optional
	Dataset *InitializerSource `json:"dataset,omitempty"`
	// +optional
	Model *InitializerSource `json:"model,omitempty"`
}

// InitializerSource is where an initializer fetches from.
type InitializerSource struct {
	// +optional
	StorageURI *string `json:"storageUri,omitempty"`
}

// Trainer overrides a runtime's trainer step.
type Trainer struct {
	// +optional
	Image *string `json:"image,omitempty"`
	// +optional
	Command []string `json:"command,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`

	// NumNodes is the number of training nodes; it is the gang minCount when
	// the runtime uses podGroupPolicy.workload.
	// +optional
	NumNodes *int32 `json:"numNodes,omitempty"`

	// +optional
	ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`

	// +optional
	NumProcPerNode *intstr.IntOrString `json:"numProcPerNode,omitempty"`
}

// TrainJobStatus is the observed state of a TrainJob.
type TrainJobStatus struct {
	// Conditions: Suspended, Complete, Failed (shepherd keeps its own
	// WorkloadReady in the TrainJob's WorkloadRecord).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// JobsStatus reports the TrainJob's replicatedJobs.
	// +listType=map
	// +listMapKey=name
	// +optional
	JobsStatus []JobStatus `json:"jobsStatus,omitempty"`
}

// JobStatus counts a replicatedJob's Jobs by state.
type JobStatus struct {
	Name      string `json:"name"`
	Ready     int32  `json:"ready"`
	Succeeded int32  `json:"succeeded"`
	Failed    int32  `json:"failed"`
	Active    int32  `json:"active"`
	Suspended int32  `json:"suspended"`
}

// TrainJob is one training run on a training runtime.
// +kubebuilder:object:root=true
type TrainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TrainJobSpec   `json:"spec,omitempty"`
	Status TrainJobStatus `json:"status,omitempty"`
}

// TrainJobList is a list of TrainJobs.
// +kubebuilder:object:root=true
type TrainJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TrainJob{}, &TrainJobList{})
}
