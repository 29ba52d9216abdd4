package v1alpha1

import (
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodCliqueSet replicates a gang-scheduled template of PodCliques.
//
// The three root rules forbid the deprecated packDomain on create (an update
// of an object that already has it is allowed).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.hpaPodSelector
// +kubebuilder:resource:shortName={pcs}
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="PCLQs-Updated",type=integer,JSONPath=`.status.updateProgress.updatedPodCliquesCount`
// +kubebuilder:printcolumn:name="PCLQs-Total",type=integer,JSONPath=`.status.updateProgress.totalPodCliquesCount`
// +kubebuilder:printcolumn:name="PCSGs-Updated",type=integer,JSONPath=`.status.updateProgress.updatedPodCliqueScalingGroupsCount`
// +kubebuilder:printcolumn:name="PCSGs-Total",type=integer,JSONPath=`.status.updateProgress.totalPodCliqueScalingGroupsCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.spec.template.topologyConstraint) || !has(self.spec.template.topologyConstraint.packDomain)",message="packDomain is deprecated and cannot be used on new workloads; use pack.required",fieldPath=".spec.template.topologyConstraint.packDomain",optionalOldSelf=true,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.spec.template.cliques) || self.spec.template.cliques.all(c, !has(c.topologyConstraint) || !has(c.topologyConstraint.packDomain))",message="packDomain is deprecated and cannot be used on new workloads; use pack.required",fieldPath=".spec.template.cliques",optionalOldSelf=true,reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.spec.template.podCliqueScalingGroups) || self.spec.template.podCliqueScalingGroups.all(g, !has(g.topologyConstraint) || !has(g.topologyConstraint.packDomain))",message="packDomain is deprecated and cannot be used on new workloads; use pack.required",fieldPath=".spec.template.podCliqueScalingGroups",optionalOldSelf=true,reason=FieldValueForbidden
type PodCliqueSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec PodCliqueSetSpec `json:"spec"`
	// Status is the observed state.
	Status PodCliqueSetStatus `json:"status,omitempty"`
}

// PodCliqueSetList is a list of PodCliqueSets.
//
// +kubebuilder:object:root=true
type PodCliqueSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the PodCliqueSets.
	Items []PodCliqueSet `json:"items"`
}

// PodCliqueSetSpec is the desired state of a PodCliqueSet.
type PodCliqueSetSpec struct {
	// Replicas is the number of copies (PodGangs) of the template.
	// +kubebuilder:default=0
	Replicas int32 `json:"replicas,omitempty"`
	// UpdateStrategy says how replicas are replaced when the template changes.
	// +optional
	UpdateStrategy *PodCliqueSetUpdateStrategy `json:"updateStrategy,omitempty"`
	// Template is what every replica is made of.
	Template PodCliqueSetTemplateSpec `json:"template"`
}

// PodCliqueSetUpdateStrategy selects the update strategy.
type PodCliqueSetUpdateStrategy struct {
	// Type is RollingRecreate (default) or OnDelete.
	// +kubebuilder:default=RollingRecreate
	Type UpdateStrategyType `json:"type,omitempty"`
}

// UpdateStrategyType names an update strategy.
// +kubebuilder:validation:Enum={RollingRecreate,OnDelete}
type UpdateStrategyType string

// PodCliqueSetTemplateSpec is the template of one PodCliqueSet replica.
type PodCliqueSetTemplateSpec struct {
	// Cliques are the PodCliques of a replica, keyed by name.
	// +listType=map
	// +listMapKey=name
	Cliques []*PodCliqueTemplateSpec `json:"cliques"`
	// StartupType orders the start of the cliques.
	// +kubebuilder:default=CliqueStartupTypeAnyOrder
	// +optional
	StartupType *CliqueStartupType `json:"cliqueStartupType,omitempty"`
	// PriorityClassName is given to the pods.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// HeadlessServiceConfig configures the per-PodGang headless service.
	// +optional
	HeadlessServiceConfig *HeadlessServiceConfig `json:"headlessServiceConfig,omitempty"`
	// TopologyConstraint places each replica within a topology domain.
	// +optional
	TopologyConstraint *TopologyConstraint `json:"topologyConstraint,omitempty"`
	// TerminationDelay is how long a replica may stay MinAvailableBreached
	// before it is gang-terminated (Grove's defaulting webhook sets 4h).
	// +optional
	TerminationDelay *metav1.Duration `json:"terminationDelay,omitempty"`
	// ResourceClaimTemplates are named claim templates for resourceSharing.
	// +optional
	ResourceClaimTemplates []ResourceClaimTemplateConfig `json:"resourceClaimTemplates,omitempty"`
	// ResourceSharing shares ResourceClaims at the PodCliqueSet level.
	// +optional
	ResourceSharing []PCSResourceSharingSpec `json:"resourceSharing,omitempty"`
	// PodCliqueScalingGroupConfigs group cliques that scale together.
	PodCliqueScalingGroupConfigs []PodCliqueScalingGroupConfig `json:"podCliqueScalingGroups,omitempty"`
}

// CliqueStartupType orders the start of a replica's cliques.
// +kubebuilder:validation:Enum={CliqueStartupTypeAnyOrder,CliqueStartupTypeInOrder,CliqueStartupTypeExplicit}
type CliqueStartupType string

// PodCliqueTemplateSpec is the template of one PodClique.
type PodCliqueTemplateSpec struct {
	// Name identifies the clique (its role) within the PodCliqueSet.
	Name string `json:"name"`
	// Labels are put on the PodClique.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are put on the PodClique.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// TopologyConstraint places each clique replica; at least as strict as
	// its parents'.
	// +optional
	TopologyConstraint *TopologyConstraint `json:"topologyConstraint,omitempty"`
	// ResourceSharing shares ResourceClaims at the PodClique level.
	// +optional
	ResourceSharing []ResourceSharingSpec `json:"resourceSharing,omitempty"`
	// Spec is the PodClique's spec.
	Spec PodCliqueSpec `json:"spec"`
}

// PodCliqueScalingGroupConfig names cliques that are scaled as one unit.
type PodCliqueScalingGroupConfig struct {
	// Name is unique within the PodCliqueSet.
	Name string `json:"name"`
	// CliqueNames are the member cliques.
	CliqueNames []string `json:"cliqueNames"`
	// Annotations are put on the PodCliqueScalingGroup.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Replicas is the initial number of group replicas.
	// +optional
	// +kubebuilder:default=1
	Replicas *int32 `json:"replicas,omitempty"`
	// MinAvailable is the fewest available group replicas before the
	// PodCliqueSet replica is breached.
	// +optional
	// +kubebuilder:default=1
	MinAvailable *int32 `json:"minAvailable,omitempty"`
	// ScaleConfig configures a horizontal pod autoscaler for the group.
	// +optional
	ScaleConfig *AutoScalingConfig `json:"scaleConfig,omitempty"`
	// ResourceSharing shares ResourceClaims at the group level.
	// +optional
	ResourceSharing []PCSGResourceSharingSpec `json:"resourceSharing,omitempty"`
	// TopologyConstraint places each group replica.
	// +optional
	TopologyConstraint *TopologyConstraint `json:"topologyConstraint,omitempty"`
}

// HeadlessServiceConfig configures the headless service of a PodGang.
type HeadlessServiceConfig struct {
	// PublishNotReadyAddresses publishes DNS records of pods that are not
	// ready.
	// +kubebuilder:default=true
	PublishNotReadyAddresses bool `json:"publishNotReadyAddresses"`
}

// ResourceClaimTemplateConfig is a named ResourceClaimTemplate spec.
type ResourceClaimTemplateConfig struct {
	// Name identifies the template within the PodCliqueSet.
	Name string `json:"name"`
	// TemplateSpec is what the ResourceClaims are made from.
	TemplateSpec resourcev1.ResourceClaimTemplateSpec `json:"templateSpec"`
}

// PodCliqueSetStatus is the observed state of a PodCliqueSet.
type PodCliqueSetStatus struct {
	// ObservedGeneration is the generation last reconciled.
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// Conditions of the PodCliqueSet.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastErrors are the errors of the last reconcile.
	LastErrors []LastError `json:"lastErrors,omitempty"`
	// Replicas is the number of replicas created.
	Replicas int32 `json:"replicas,omitempty"`
	// UpdatedReplicas counts replicas at the current template.
	// +kubebuilder:default=0
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// AvailableReplicas counts replicas none of whose standalone cliques and
	// scaling groups is MinAvailableBreached.
	// +kubebuilder:default=0
	AvailableReplicas int32 `json:"availableReplicas"`
	// Selector selects the pods, for the scale subresource.
	Selector *string `json:"hpaPodSelector,omitempty"`
	// PodGangStatuses report each PodGang.
	PodGangStatuses []PodGangStatus `json:"podGangStatuses,omitempty"`
	// CurrentGenerationHash hashes the spec fields whose change triggers an
	// update.
	CurrentGenerationHash *string `json:"currentGenerationHash,omitempty"`
	// UpdateProgress reports an update in progress.
	UpdateProgress *PodCliqueSetUpdateProgress `json:"updateProgress,omitempty"`
}

// PodCliqueSetUpdateProgress reports an update of a PodCliqueSet.
type PodCliqueSetUpdateProgress struct {
	// UpdateStartedAt is when the update began.
	UpdateStartedAt metav1.Time `json:"updateStartedAt,omitempty"`
	// UpdateEndedAt is when Grove had no update work left.
	// +optional
	UpdateEndedAt *metav1.Time `json:"updateEndedAt,omitempty"`
	// UpdatedPodCliquesCount counts PodCliques at the new hash.
	// +optional
	// +kubebuilder:default=0
	UpdatedPodCliquesCount int32 `json:"updatedPodCliquesCount,omitempty"`
	// TotalPodCliquesCount counts the PodCliques expected.
	// +optional
	// +kubebuilder:default=0
	TotalPodCliquesCount int32 `json:"totalPodCliquesCount,omitempty"`
	// UpdatedPodCliqueScalingGroupsCount counts groups at the new hash.
	// +optional
	// +kubebuilder:default=0
	UpdatedPodCliqueScalingGroupsCount int32 `json:"updatedPodCliqueScalingGroupsCount,omitempty"`
	// TotalPodCliqueScalingGroupsCount counts the groups expected.
	// +optional
	// +kubebuilder:default=0
	TotalPodCliqueScalingGroupsCount int32 `json:"totalPodCliqueScalingGroupsCount,omitempty"`
	// CurrentlyUpdating are the replicas being updated.
	// +optional
	CurrentlyUpdating []PodCliqueSetReplicaUpdateProgress `json:"currentlyUpdating,omitempty"`
}

// PodCliqueSetReplicaUpdateProgress reports the update of one replica.
type PodCliqueSetReplicaUpdateProgress struct {
	// ReplicaIndex is the replica's index.
	ReplicaIndex int32 `json:"replicaIndex"`
	// UpdateStartedAt is when the replica's update began.
	UpdateStartedAt metav1.Time `json:"updateStartedAt,omitempty"`
	// UpdateEndedAt is when the replica's update finished.
	// +optional
	UpdateEndedAt *metav1.Time `json:"updateEndedAt,omitempty"`
}

// PodGangStatus reports one PodGang.
type PodGangStatus struct {
	// Name of the PodGang.
	Name string `json:"name"`
	// Phase of the PodGang.
	Phase PodGangPhase `json:"phase"`
	// Conditions of the PodGang.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodGangPhase is the phase of a PodGang.
// +kubebuilder:validation:Enum={Pending,Starting,Running,Failed,Succeeded}
type PodGangPhase string
