package trainer

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
)

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.Trainer, Group: api.TrainerGroup, Version: trainerv1alpha1.GroupVersion.Version,
		Kinds:    []string{api.KindTrainJob, api.KindTrainingRuntime, api.KindClusterTrainingRuntime},
		LookedUp: []client.Object{&trainerv1alpha1.TrainingRuntime{}, &trainerv1alpha1.ClusterTrainingRuntime{}, &trainerv1alpha1.TrainJob{}},
		Checks:   Checks,
		Knobs: map[string]integrations.KnobToken{
			"runtimeTTL":      {Knob: RuntimeTTL},
			"runtimeWorkload": {Knob: RuntimeWorkload},
		},
	})
}
