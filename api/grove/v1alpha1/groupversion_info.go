// Package v1alpha1 holds the subset of the Grove API (grove.io/v1alpha1) that
// shepherd reads and writes: PodCliqueSet with its Training workload type
// (GREP-0285) and the PodClique / PodCliqueScalingGroup status that gang
// termination is computed from. Grove's API module is not on the module
// proxy, so these types are shepherd's own; every field they leave out is
// preserved by the CRDs.
//
// +kubebuilder:object:generate=true
// +groupName=grove.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "grove.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
