package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodCliqueScalingGroup scales a group of PodCliques as one unit; Grove
// makes one per scaling-group config and PodCliqueSet replica.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName={pcsg}
// +kubebuilder:printcolumn:name="MinAvail",type=integer,JSONPath=`.spec.minAvailable`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Scheduled",type=integer,JSONPath=`.status.scheduledReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="PCLQs-Updated",type=integer,JSONPath=`.status.updateProgress.updatedPodCliquesCount`
// +kubebuilder:printcolumn:name="PCLQs-Total",type=integer,JSONPath=`.status.updateProgress.totalPodCliquesCount`
// +kubebuilder:printcolumn:name="MinBreached",type=string,JSONPath=`.status.conditions[?(@.type=="MinAvailableBreached")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodCliqueScalingGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec PodCliqueScalingGroupSpec `json:"spec"`
	// Status is the observed state.
	Status PodCliqueScalingGroupStatus `json:"status,omitempty"`
}

// PodCliqueScalingGroupList is a list of PodCliqueScalingGroups.
//
// +kubebuilder:object:root=true
type PodCliqueScalingGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the PodCliqueScalingGroups.
	Items []PodCliqueScalingGroup `json:"items"`
}

// PodCliqueScalingGroupSpec is the desired state of a PodCliqueScalingGroup.
// It has no terminationDelay and no scaleConfig: those live only in the
// PodCliqueSet (template.terminationDelay, and the config's scaleConfig).
type PodCliqueScalingGroupSpec struct {
	// Replicas is the number of group replicas.
	// +kubebuilder:default=1
	Replicas int32 `json:"replicas"`
	// MinAvailable is the fewest available group replicas before the group
	// is breached.
	// +optional
	// +kubebuilder:default=1
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// CliqueNames are the cliques of the matching PodCliqueSet config.
	CliqueNames []string `json:"cliqueNames"`
}

// PodCliqueScalingGroupStatus is the observed state of a
// PodCliqueScalingGroup.
type PodCliqueScalingGroupStatus struct {
	// Replicas is the observed number of group replicas.
	Replicas int32 `json:"replicas,omitempty"`
	// ScheduledReplicas counts replicas whose cliques each have minAvailable
	// pods scheduled.
	// +kubebuilder:default=0
	ScheduledReplicas int32 `json:"scheduledReplicas"`
	// AvailableReplicas counts replicas whose cliques are all available.
	// +kubebuilder:default=0
	AvailableReplicas int32 `json:"availableReplicas"`
	// UpdatedReplicas counts replicas at the current PodCliqueSet hash.
	// +kubebuilder:default=0
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// Selector selects the pods, for the scale subresource.
	Selector *string `json:"selector,omitempty"`
	// ObservedGeneration is the generation last reconciled.
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// LastErrors are the errors of the last reconcile.
	LastErrors []LastError `json:"lastErrors,omitempty"`
	// Conditions: MinAvailableBreached, GangTerminationInProgress, ...
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// CurrentPodCliqueSetGenerationHash is the PodCliqueSet hash fully
	// realized in this group.
	CurrentPodCliqueSetGenerationHash *string `json:"currentPodCliqueSetGenerationHash,omitempty"`
	// UpdateProgress reports an update in progress.
	UpdateProgress *PodCliqueScalingGroupUpdateProgress `json:"updateProgress,omitempty"`
}

// PodCliqueScalingGroupUpdateProgress reports an update of a group.
type PodCliqueScalingGroupUpdateProgress struct {
	// UpdateStartedAt is when the update began.
	UpdateStartedAt metav1.Time `json:"updateStartedAt"`
	// UpdateEndedAt is when Grove had no update work left.
	UpdateEndedAt *metav1.Time `json:"updateEndedAt,omitempty"`
	// PodCliqueSetGenerationHash is the PodCliqueSet hash being converged to.
	PodCliqueSetGenerationHash string `json:"podCliqueSetGenerationHash"`
	// UpdatedPodCliquesCount counts PodCliques at the new hash.
	// +optional
	// +kubebuilder:default=0
	UpdatedPodCliquesCount int32 `json:"updatedPodCliquesCount,omitempty"`
	// TotalPodCliquesCount counts the PodCliques expected.
	// +optional
	// +kubebuilder:default=0
	TotalPodCliquesCount int32 `json:"totalPodCliquesCount,omitempty"`
	// ReadyReplicaIndicesSelectedToUpdate tracks ready replicas replaced one
	// by one.
	ReadyReplicaIndicesSelectedToUpdate *PodCliqueScalingGroupReplicaUpdateProgress `json:"readyReplicaIndicesSelectedToUpdate,omitempty"`
}

// PodCliqueScalingGroupReplicaUpdateProgress names the replica being
// replaced and those done.
type PodCliqueScalingGroupReplicaUpdateProgress struct {
	// Current is the replica index being replaced.
	Current int32 `json:"current"`
	// Completed are the replica indices already replaced.
	Completed []int32 `json:"completed,omitempty"`
}
