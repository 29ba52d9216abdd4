// Package v1alpha2 holds the subset of the JobSet API (jobset.x-k8s.io/v1alpha2)
// that shepherd reads and writes: replicatedJobs with dependsOn, the
// deprecated startupPolicy (KEP-104), and the status shepherd observes.
// sigs.k8s.io/jobset is not on the module proxy, so these types are shepherd's
// own; every field they leave out is preserved by the CRD.
//
// +kubebuilder:object:generate=true
// +groupName=jobset.x-k8s.io
package v1alpha2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "jobset.x-k8s.io", Version: "v1alpha2"}

	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
