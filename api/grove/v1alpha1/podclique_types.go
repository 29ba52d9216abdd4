package v1alpha1

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodClique is a set of pods with one role.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.hpaPodSelector
// +kubebuilder:resource:shortName={pclq}
// +kubebuilder:printcolumn:name="MinAvail",type=integer,JSONPath=`.spec.minAvailable`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Scheduled",type=integer,JSONPath=`.status.scheduledReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Gated",type=integer,JSONPath=`.status.scheduleGatedReplicas`,priority=1
// +kubebuilder:printcolumn:name="MinBreached",type=string,JSONPath=`.status.conditions[?(@.type=="MinAvailableBreached")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodClique struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec PodCliqueSpec `json:"spec"`
	// Status is the observed state.
	Status PodCliqueStatus `json:"status,omitempty"`
}

// PodCliqueList is a list of PodCliques.
//
// +kubebuilder:object:root=true
type PodCliqueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the PodCliques.
	Items []PodClique `json:"items"`
}

// PodCliqueSpec is the desired state of a PodClique.
type PodCliqueSpec struct {
	// RoleName is the role the pods play.
	RoleName string `json:"roleName"`
	// PodSpec is the spec of every pod.
	PodSpec corev1.PodSpec `json:"podSpec"`
	// Replicas is the number of pods.
	Replicas int32 `json:"replicas"`
	// MinAvailable is the fewest pods that are gang-scheduled and below
	// which the clique is breached; Grove's webhook defaults it to replicas.
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// StartsAfter names cliques that must start first (explicit startup).
	// +optional
	StartsAfter []string `json:"startsAfter,omitempty"`
	// ScaleConfig configures a horizontal pod autoscaler for the clique.
	// +optional
	ScaleConfig *AutoScalingConfig `json:"autoScalingConfig,omitempty"`
}

// AutoScalingConfig configures a horizontal pod autoscaler.
type AutoScalingConfig struct {
	// MinReplicas is the scale-in limit.
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the scale-out limit.
	MaxReplicas int32 `json:"maxReplicas"`
	// Metrics drive the desired replica count.
	// +listType=atomic
	// +optional
	Metrics []autoscalingv2.MetricSpec `json:"metrics,omitempty"`
}

// PodCliqueStatus is the observed state of a PodClique.
type PodCliqueStatus struct {
	// ObservedGeneration is the generation last reconciled.
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// LastErrors are the errors of the last reconcile.
	LastErrors []LastError `json:"lastErrors,omitempty"`
	// Replicas counts non-terminated pods.
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas counts ready pods.
	// +kubebuilder:default=0
	ReadyReplicas int32 `json:"readyReplicas"`
	// UpdatedReplicas counts pods at the current revision.
	// +kubebuilder:default=0
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// ScheduleGatedReplicas counts pods created with scheduling gates.
	// +kubebuilder:default=0
	ScheduleGatedReplicas int32 `json:"scheduleGatedReplicas"`
	// ScheduledReplicas counts pods bound by the scheduler.
	// +kubebuilder:default=0
	ScheduledReplicas int32 `json:"scheduledReplicas"`
	// Selector selects the pods, for the scale subresource.
	Selector *string `json:"hpaPodSelector,omitempty"`
	// Conditions: MinAvailableBreached, PodCliqueScheduled, ...
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// CurrentPodCliqueSetGenerationHash is the PodCliqueSet hash fully
	// realized in this clique.
	CurrentPodCliqueSetGenerationHash *string `json:"currentPodCliqueSetGenerationHash,omitempty"`
	// CurrentPodTemplateHash is the pod template hash fully realized.
	CurrentPodTemplateHash *string `json:"currentPodTemplateHash,omitempty"`
	// UpdateProgress reports an update in progress.
	UpdateProgress *PodCliqueUpdateProgress `json:"updateProgress,omitempty"`
}

// PodCliqueUpdateProgress reports an update of a PodClique.
type PodCliqueUpdateProgress struct {
	// UpdateStartedAt is when the update began.
	UpdateStartedAt metav1.Time `json:"updateStartedAt,omitempty"`
	// UpdateEndedAt is when Grove had no update work left; nil while an
	// automatic update runs.
	UpdateEndedAt *metav1.Time `json:"updateEndedAt,omitempty"`
	// PodCliqueSetGenerationHash is the PodCliqueSet hash being converged to.
	PodCliqueSetGenerationHash string `json:"podCliqueSetGenerationHash"`
	// PodTemplateHash is the pod template hash being converged to.
	PodTemplateHash string `json:"podTemplateHash"`
	// ReadyPodsSelectedToUpdate tracks ready pods replaced one by one.
	ReadyPodsSelectedToUpdate *PodsSelectedToUpdate `json:"readyPodsSelectedToUpdate,omitempty"`
}

// PodsSelectedToUpdate names the pod being replaced and those done.
type PodsSelectedToUpdate struct {
	// Current is the pod being replaced.
	Current string `json:"current"`
	// Completed are the pods already replaced.
	Completed []string `json:"completed,omitempty"`
}
