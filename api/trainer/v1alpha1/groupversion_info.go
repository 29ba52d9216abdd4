// Package v1alpha1 holds the subset of the Kubeflow Trainer API
// (trainer.kubeflow.org/v1alpha1) that shepherd reads and writes: TrainJob
// with its activeDeadlineSeconds (KEP-2899), and TrainingRuntime /
// ClusterTrainingRuntime with ttlSecondsAfterFinished and
// podGroupPolicy.workload (KEP-3015). Every field left out is preserved by the
// CRDs.
//
// +kubebuilder:object:generate=true
// +groupName=trainer.kubeflow.org
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this package's types.
	GroupVersion = schema.GroupVersion{Group: "trainer.kubeflow.org", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
