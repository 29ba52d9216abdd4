package v1alpha2

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StartupPolicyOrder is the order in which a JobSet's replicatedJobs start.
// Allowed values are enforced by rule V-JS-1, not by the schema, so that a
// rejected value reaches shepherd and is audited with a clear message.
type StartupPolicyOrder string

const (
	// AnyOrder starts every replicatedJob at once.
	AnyOrder StartupPolicyOrder = "AnyOrder"
	// InOrder starts each replicatedJob once the previous one is ready.
	// Deprecated in favour of dependsOn (KEP-104).
	InOrder StartupPolicyOrder = "InOrder"
)

// DependsOnStatus is the status of a replicatedJob another one waits for
// (values enforced by rule V-JS-4).
type DependsOnStatus string

const (
	DependencyReady    DependsOnStatus = "Ready"
	DependencyComplete DependsOnStatus = "Complete"
)

// JobSetSpec is the desired state of a JobSet.
// +kubebuilder:pruning:PreserveUnknownFields
type JobSetSpec struct {
	// ReplicatedJobs are the groups of Jobs the JobSet runs.
	// +listType=map
	// +listMapKey=name
	// +optional
	ReplicatedJobs []ReplicatedJob `json:"replicatedJobs,omitempty"`

	// StartupPolicy orders the start of replicatedJobs. Deprecated: use
	// replicatedJobs[].dependsOn.
	// +optional
	StartupPolicy *StartupPolicy `json:"startupPolicy,omitempty"`

	// SuccessPolicy decides when the JobSet has succeeded.
	// +optional
	SuccessPolicy *SuccessPolicy `json:"successPolicy,omitempty"`

	// FailurePolicy decides what happens when a child Job fails.
	// +optional
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`

	// Network configures the JobSet's headless service.
	// +optional
	Network *Network `json:"network,omitempty"`

	// Suspend suspends the JobSet and its Jobs.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// TTLSecondsAfterFinished deletes the JobSet this long after it finished.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// ReplicatedJob is a group of identical Jobs.
// +kubebuilder:pruning:PreserveUnknownFields
type ReplicatedJob struct {
	// Name is unique within the JobSet.
	Name string `json:"name"`

	// Template is the Job template of every replica.
	Template batchv1.JobTemplateSpec `json:"template"`

	// Replicas is the number of Jobs created from Template.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// DependsOn lists earlier replicatedJobs that must reach a status before
	// this one starts.
	// +optional
	DependsOn []DependsOn `json:"dependsOn,omitempty"`
}

// DependsOn names an earlier replicatedJob and the status it must reach.
type DependsOn struct {
	// Name of the replicatedJob depended on.
	Name string `json:"name"`
	// Status the replicatedJob must reach: Ready or Complete.
	Status DependsOnStatus `json:"status"`
}

// StartupPolicy is the deprecated startup ordering of KEP-104.
type StartupPolicy struct {
	// StartupPolicyOrder is AnyOrder or InOrder.
	// +optional
	StartupPolicyOrder StartupPolicyOrder `json:"startupPolicyOrder,omitempty"`
}

// SuccessPolicy decides when a JobSet has succeeded.
// +kubebuilder:pruning:PreserveUnknownFields
type SuccessPolicy struct {
	// Operator is All or Any.
	// +kubebuilder:validation:Enum=All;Any
	// +optional
	Operator string `json:"operator,omitempty"`
	// TargetReplicatedJobs are the replicatedJobs the operator applies to.
	// +optional
	TargetReplicatedJobs []string `json:"targetReplicatedJobs,omitempty"`
}

// FailurePolicy decides what happens when a child Job fails.
// +kubebuilder:pruning:PreserveUnknownFields
type FailurePolicy struct {
	// MaxRestarts is how often the JobSet is recreated after a failure.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxRestarts int32 `json:"maxRestarts,omitempty"`
}

// Network configures a JobSet's headless service.
// +kubebuilder:pruning:PreserveUnknownFields
type Network struct {
	// +optional
	EnableDNSHostnames *bool `json:"enableDNSHostnames,omitempty"`
	// +optional
	Subdomain string `json:"subdomain,omitempty"`
	// +optional
	PublishNotReadyAddresses *bool `json:"publishNotReadyAddresses,omitempty"`
}

// JobSetStatus is the observed state of a JobSet.
// +kubebuilder:pruning:PreserveUnknownFields
type JobSetStatus struct {
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// +listType=map
	// +listMapKey=name
	// +optional
	ReplicatedJobsStatus []ReplicatedJobStatus `json:"replicatedJobsStatus,omitempty"`
}

// ReplicatedJobStatus counts a replicatedJob's Jobs by state.
type ReplicatedJobStatus struct {
	Name      string `json:"name"`
	Ready     int32  `json:"ready"`
	Succeeded int32  `json:"succeeded"`
	Failed    int32  `json:"failed"`
	Active    int32  `json:"active"`
	Suspended int32  `json:"suspended"`
}

// JobSet runs groups of Jobs as one unit.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=js
// +kubebuilder:printcolumn:name="Startup",type=string,JSONPath=`.spec.startupPolicy.startupPolicyOrder`,priority=1
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Completed",type=string,JSONPath=`.status.conditions[?(@.type=="Completed")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type JobSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   JobSetSpec   `json:"spec,omitempty"`
	Status JobSetStatus `json:"status,omitempty"`
}

// JobSetList is a list of JobSets.
// +kubebuilder:object:root=true
type JobSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []JobSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&JobSet{}, &JobSetList{})
}
