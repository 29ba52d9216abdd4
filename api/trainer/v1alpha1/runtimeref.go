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

// RuntimeIndexKey identifies a runtime in field indexes that map runtimes to
// the TrainJobs referencing them: kind/namespace/name, the namespace empty
// for a ClusterTrainingRuntime.
func RuntimeIndexKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// IndexKey is the RuntimeIndexKey of the runtime this reference names, read
// from a TrainJob in trainJobNamespace; ok is false for a reference to
// something other than a Trainer runtime.
func (r RuntimeRef) IndexKey(trainJobNamespace string) (key string, ok bool) {
	if !r.IsTrainerRuntime() {
		return "", false
	}
	switch kind := r.EffectiveKind(); kind {
	case "ClusterTrainingRuntime":
		return RuntimeIndexKey(kind, "", r.Name), true
	case "TrainingRuntime":
		return RuntimeIndexKey(kind, trainJobNamespace, r.Name), true
	}
	return "", false
}
