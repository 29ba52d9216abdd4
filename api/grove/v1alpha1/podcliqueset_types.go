package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadType says whether a PodCliqueSet serves (Inference) or trains
// (Training). Allowed values and immutability are rule V-PCS-1.
type WorkloadType string

const (
	WorkloadTypeInference WorkloadType = "Inference"
	WorkloadTypeTraining  WorkloadType = "Training"
)

// PodCliqueSetPhase is the lifecycle phase of a PodCliqueSet (GREP-0285).
type PodCliqueSetPhase string

const (
	PhasePending   PodCliqueSetPhase = "Pending"
	PhaseRunning   PodCliqueSetPhase = "Running"
	PhaseSucceeded PodCliqueSetPhase = "Succeeded"
	PhaseFailed    PodCliqueSetPhase = "Failed"
)

// PodCliqueSetSpec is the desired state of a PodCliqueSet.
type PodCliqueSetSpec struct {
	// Replicas is the number of PodCliqueSet replicas (gangs).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// WorkloadType is Inference (default) or Training.
	// +optional
	WorkloadType *WorkloadType `json:"workloadType,omitempty"`

	// TrainingSpec bounds a Training workload's runtime and restarts.
	// +optional
	TrainingSpec *TrainingSpec `json:"trainingSpec,omitempty"`

	// Template is the template of every replica.
	Template PodCliqueSetTemplateSpec `json:"template"`
}

// TrainingSpec bounds a Training workload (GREP-0285).
type TrainingSpec struct {
	// MaxRuntime is the longest the workload may run from its first start,
	// restarts included.
	// +optional
	MaxRuntime *metav1.Duration `json:"maxRuntime,omitempty"`

	// MaxRestarts is the total number of replica restarts across the whole
	// PodCliqueSet before it is marked Failed.
	// +optional
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}

// PodCliqueSetTemplateSpec is the template of a PodCliqueSet replica.
type PodCliqueSetTemplateSpec struct {
	// Cliques are the PodCliques of every replica.
	Cliques []*PodCliqueTemplateSpec `json:"cliques"`

	// PodCliqueScalingGroupConfigs group cliques that scale together.
	// +optional
	PodCliqueScalingGroupConfigs []PodCliqueScalingGroupConfig `json:"podCliqueScalingGroups,omitempty"`

	// TerminationDelay is how long a MinAvailableBreached gang may stay
	// breached before it is terminated. Unset: gang termination is off.
	// +optional
	TerminationDelay *metav1.Duration `json:"terminationDelay,omitempty"`

	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// PodCliqueTemplateSpec is the template of one PodClique.
type PodCliqueTemplateSpec struct {
	// Name is unique within the PodCliqueSet (rule V-PCS-4).
	Name string `json:"name"`
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Spec of the PodClique.
	Spec PodCliqueSpec `json:"spec"`
}

// PodCliqueScalingGroupConfig groups cliques that scale as one unit.
type PodCliqueScalingGroupConfig struct {
	// Name is unique within the PodCliqueSet.
	Name string `json:"name"`
	// CliqueNames are the cliques in this group; each clique is in at most
	// one group (rule V-PCS-4).
	CliqueNames []string `json:"cliqueNames"`
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// MinAvailable is the fewest healthy group replicas before the whole
	// PodCliqueSet replica is breached. Defaults to replicas.
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// TerminationDelay overrides the PodCliqueSet's for this group; it needs
	// the PodCliqueSet-level delay to be set (rule V-PCS-3).
	// +optional
	TerminationDelay *metav1.Duration `json:"terminationDelay,omitempty"`
	// ScaleConfig configures autoscaling; forbidden for Training.
	// +optional
	ScaleConfig *AutoScalingConfig `json:"scaleConfig,omitempty"`
}

// AutoScalingConfig configures a horizontal pod autoscaler.
type AutoScalingConfig struct {
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
}

// PodCliqueSetStatus is the observed state of a PodCliqueSet.
type PodCliqueSetStatus struct {
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// Phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase PodCliqueSetPhase `json:"phase,omitempty"`
	// RestartCount is the number of replica restarts so far (Training).
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`
	// StartTime is when the workload first ran; never reset on restarts.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodCliqueSet is a set of gang-scheduled PodCliques, replicated.
// +kubebuilder:object:root=true
type PodCliqueSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodCliqueSetSpec   `json:"spec,omitempty"`
	Status PodCliqueSetStatus `json:"status,omitempty"`
}

// PodCliqueSetList is a list of PodCliqueSets.
// +kubebuilder:object:root=true
type PodCliqueSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodCliqueSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PodCliqueSet{}, &PodCliqueSetList{})
}
