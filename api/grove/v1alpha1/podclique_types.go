package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodCliqueSpec is the desired state of a PodClique.
type PodCliqueSpec struct {
	// +optional
	RoleName string `json:"roleName,omitempty"`
	// Replicas is the number of pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// MinAvailable is the fewest ready pods before the clique is breached.
	// Defaults to replicas.
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// StartsAfter names cliques that must start first.
	// +optional
	StartsAfter []string `json:"startsAfter,omitempty"`
	// PodSpec is the spec of every pod.
	PodSpec corev1.PodSpec `json:"podSpec"`
	// ScaleConfig configures autoscaling; forbidden for Training.
	// +optional
	ScaleConfig *AutoScalingConfig `json:"autoScalingConfig,omitempty"`
}

// RollingUpdateProgress reports a rolling update of a PodClique.
type RollingUpdateProgress struct {
	UpdateStartedAt metav1.Time `json:"updateStartedAt"`
	// +optional
	UpdateEndedAt *metav1.Time `json:"updateEndedAt,omitempty"`
}

// PodCliqueStatus is the observed state of a PodClique.
type PodCliqueStatus struct {
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas counts pods that are Ready and not terminating.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	ScheduledReplicas int32 `json:"scheduledReplicas,omitempty"`
	// WasAvailable becomes true once readyReplicas reached minAvailable
	// outside a rolling update, and never reverts.
	// +optional
	WasAvailable bool `json:"wasAvailable,omitempty"`
	// +optional
	RollingUpdateProgress *RollingUpdateProgress `json:"rollingUpdateProgress,omitempty"`
	// UpdateProgress is Grove's name of rollingUpdateProgress (its
	// status.updateProgress; only the two timestamps shepherd reads are
	// modelled). Read both through integrations/grove.UpdateInProgress.
	// +optional
	UpdateProgress *RollingUpdateProgress `json:"updateProgress,omitempty"`
	// Conditions: MinAvailableBreached, Succeeded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodClique is a group of pods with one role.
// +kubebuilder:object:root=true
type PodClique struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodCliqueSpec   `json:"spec,omitempty"`
	Status PodCliqueStatus `json:"status,omitempty"`
}

// PodCliqueList is a list of PodCliques.
// +kubebuilder:object:root=true
type PodCliqueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodClique `json:"items"`
}

// PodCliqueScalingGroupSpec is the desired state of a PodCliqueScalingGroup.
type PodCliqueScalingGroupSpec struct {
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// +optional
	CliqueNames []string `json:"cliqueNames,omitempty"`
	// TerminationDelay overrides the PodCliqueSet's.
	// +optional
	TerminationDelay *metav1.Duration `json:"terminationDelay,omitempty"`
	// ScaleConfig configures autoscaling; forbidden for Training.
	// +optional
	ScaleConfig *AutoScalingConfig `json:"scaleConfig,omitempty"`
}

// PodCliqueScalingGroupStatus is the observed state of a PodCliqueScalingGroup.
type PodCliqueScalingGroupStatus struct {
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodCliqueScalingGroup scales a group of PodCliques as one unit.
// +kubebuilder:object:root=true
type PodCliqueScalingGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodCliqueScalingGroupSpec   `json:"spec,omitempty"`
	Status PodCliqueScalingGroupStatus `json:"status,omitempty"`
}

// PodCliqueScalingGroupList is a list of PodCliqueScalingGroups.
// +kubebuilder:object:root=true
type PodCliqueScalingGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodCliqueScalingGroup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PodClique{}, &PodCliqueList{},
		&PodCliqueScalingGroup{}, &PodCliqueScalingGroupList{})
}
