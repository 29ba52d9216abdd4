package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyConstraint asks for topology-aware placement of each replica of a
// PodCliqueSet, scaling group or clique.
//
// +kubebuilder:validation:XValidation:rule="has(self.pack) || has(self.packDomain)",message="topologyConstraint must specify pack or deprecated packDomain",fieldPath=".pack",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!(has(self.packDomain) && has(self.pack) && has(self.pack.required))",message="must not set both pack.required and deprecated packDomain",fieldPath=".pack.required"
type TopologyConstraint struct {
	// TopologyName names the ClusterTopologyBinding to use; inherited by
	// children when unset there.
	// +optional
	TopologyName string `json:"topologyName,omitempty"`
	// Pack holds the required and preferred packing domains.
	// +optional
	Pack *TopologyPackConstraint `json:"pack,omitempty"`
	// PackDomain is the deprecated spelling of pack.required.
	// +optional
	PackDomain TopologyDomain `json:"packDomain,omitempty"`
}

// TopologyPackConstraint holds packing domains.
//
// +kubebuilder:validation:XValidation:rule="has(self.required) || has(self.preferred)",message="pack must specify at least one of required or preferred",reason=FieldValueRequired
type TopologyPackConstraint struct {
	// RequiredDomain must hold each replica, or it is not scheduled.
	// +optional
	RequiredDomain TopologyDomain `json:"required,omitempty"`
	// PreferredDomain should hold each replica, best effort.
	// +optional
	PreferredDomain TopologyDomain `json:"preferred,omitempty"`
}

// TopologyDomain names a level of a cluster topology (zone, rack, host...).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*$`
type TopologyDomain string

// ResourceSharingScope is the granularity of a shared ResourceClaim.
// +kubebuilder:validation:Enum=AllReplicas;PerReplica
type ResourceSharingScope string

// ResourceSharingSpec references a claim template to share, at clique level
// and as the base of the other levels.
type ResourceSharingSpec struct {
	// Name of the template: one of the PodCliqueSet's resourceClaimTemplates,
	// else a ResourceClaimTemplate object.
	Name string `json:"name"`
	// Namespace of an external ResourceClaimTemplate.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Scope is AllReplicas or PerReplica.
	Scope ResourceSharingScope `json:"scope"`
}

// PCSResourceSharingSpec shares a claim at PodCliqueSet level.
type PCSResourceSharingSpec struct {
	ResourceSharingSpec `json:",inline"`
	// Filter limits which children get the claims.
	// +optional
	Filter *PCSResourceSharingFilter `json:"filter,omitempty"`
}

// PCSResourceSharingFilter names the children of a PodCliqueSet that get
// the claims.
type PCSResourceSharingFilter struct {
	// ChildCliqueNames are child PodCliques.
	// +optional
	ChildCliqueNames []string `json:"childCliqueNames,omitempty"`
	// ChildScalingGroupNames are child PodCliqueScalingGroups.
	// +optional
	ChildScalingGroupNames []string `json:"childScalingGroupNames,omitempty"`
}

// PCSGResourceSharingSpec shares a claim at scaling-group level.
type PCSGResourceSharingSpec struct {
	ResourceSharingSpec `json:",inline"`
	// Filter limits which cliques of the group get the claims.
	// +optional
	Filter *PCSGResourceSharingFilter `json:"filter,omitempty"`
}

// PCSGResourceSharingFilter names the cliques of a group that get the
// claims.
type PCSGResourceSharingFilter struct {
	// ChildCliqueNames are cliques of the group.
	// +optional
	ChildCliqueNames []string `json:"childCliqueNames,omitempty"`
}

// ErrorCode identifies an error.
type ErrorCode string

// LastError is an error seen by the last reconcile.
type LastError struct {
	// Code identifies the error.
	Code ErrorCode `json:"code"`
	// Description says what went wrong.
	Description string `json:"description"`
	// ObservedAt is when it was seen.
	ObservedAt metav1.Time `json:"observedAt"`
}
