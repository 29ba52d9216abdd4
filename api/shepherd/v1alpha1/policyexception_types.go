package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyExceptionSpec exempts the objects it selects from the rules it
// names. A rule's violation on such an object still runs and is still
// recorded, with the exception's name and expiry, but it neither denies nor
// warns (docs/policies.md, "Exceptions").
type PolicyExceptionSpec struct {
	// Rules are the rules exempted: built-in rule IDs (V-TJ-1) or
	// WorkloadPolicy names. The schema admits only those two forms; a rule
	// of either form that does not exist gets an InvalidException Event
	// and exempts nothing (a WorkloadPolicy applied after the exception
	// counts from then on).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([VD]-[A-Z]+-[0-9]+|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`
	// +listType=set
	Rules []string `json:"rules"`

	// NamespaceSelector selects the namespaces whose objects are exempt, by
	// their labels (kubernetes.io/metadata.name names one). Unset selects
	// every namespace; cluster-scoped objects are selected only when it is
	// unset.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// ObjectSelector selects the exempt objects by their labels (or those of
	// the stored object, on an update). Unset selects every object.
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// Expires is when the exception stops applying. Unset: it applies until
	// deleted.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`

	// Reason says why the objects are exempt, for whoever reads the audit.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// PolicyException is a cluster admin's exemption of selected objects from
// selected rules, optionally until a time.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=pex
// +kubebuilder:printcolumn:name="Rules",type=string,JSONPath=`.spec.rules`,description="The rules exempted: built-in IDs or WorkloadPolicy names"
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expires`,description="When the exception stops applying (empty: never)"
// +kubebuilder:printcolumn:name="Reason",type=string,priority=1,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PolicyException struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PolicyExceptionSpec `json:"spec"`
}

// PolicyExceptionList is a list of PolicyExceptions.
// +kubebuilder:object:root=true
type PolicyExceptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyException `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PolicyException{}, &PolicyExceptionList{})
}
