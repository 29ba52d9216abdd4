// Package v1alpha1 is shepherd's own API (shepherd.dev/v1alpha1): the
// cluster-scoped WorkloadPolicy with which admins add CEL rules to the
// built-in library, the PolicyException with which they exempt selected
// objects from selected rules, and the WorkloadRecord of shepherd's
// lifecycle state. A WorkloadPolicy's spec is the same rule model as the
// built-in rules and as a ValidatingAdmissionPolicy, so a policy can be
// exported as one.
//
// +kubebuilder:object:generate=true
// +groupName=shepherd.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "shepherd.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
