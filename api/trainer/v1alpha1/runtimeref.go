package v1alpha1

// EffectiveKind is the runtime kind a RuntimeRef names, applying the CRD
// default (ClusterTrainingRuntime) for objects read before defaulting ran,
// e.g. built in memory by tests or by a client that bypasses the apiserver.
func (r RuntimeRef) EffectiveKind() string {
	if r.Kind == nil || *r.Kind == "" {
		return "ClusterTrainingRuntime"
	}
	return *r.Kind
}

// IsTrainerRuntime reports whether the RuntimeRef points at a Kubeflow
// Trainer runtime (apiGroup trainer.kubeflow.org, the default). A reference
// to another group names something shepherd knows nothing about.
func (r RuntimeRef) IsTrainerRuntime() bool {
	return r.APIGroup == nil || *r.APIGroup == "" || *r.APIGroup == GroupVersion.Group
}
