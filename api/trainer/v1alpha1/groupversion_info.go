// Package v1alpha1 holds the subset of the Kubeflow Trainer API
// (trainer.kubeflow.org/v1alpha1) that shepherd reads and writes as a Go
// type: TrainJob, with its activeDeadlineSeconds (KEP-2899). Every field left
// out is preserved by the CRDs. Trainer's runtimes (TrainingRuntime,
// ClusterTrainingRuntime) have no type here: shepherd reads them as served
// (integrations/trainer, accessors.go), because their knobs may be seed
// fields Trainer's schema lacks.
//
// This stands in for the module's own types, github.com/kubeflow/trainer/v2
// pkg/apis/trainer/v1alpha1 at the version go.mod pins (v2.3.0), which do not
// compile against the Kubernetes libraries shepherd is built with (v0.37):
// that package's generated OpenAPI definitions name corev1.PodStatusResult,
// which k8s.io/api v0.37 no longer has. JobSet's module compiles, and
// shepherd uses its types (sigs.k8s.io/jobset/api/jobset/v1alpha2). The
// CRDs shepherd type-checks against are the module's own
// (integrations/pinned); this type generates no CRD.
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
