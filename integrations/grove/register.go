package grove

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.Grove, Group: api.GroveGroup, Version: grovev1alpha1.GroupVersion.Version,
		Kinds:    []string{api.KindPodCliqueSet, api.KindPodClique, api.KindPodCliqueScalingGroup},
		LookedUp: []client.Object{&grovev1alpha1.PodCliqueSet{}},
		Checks:   Checks,
		Defaults: Defaults,
		Knobs: map[string]integrations.KnobToken{
			"workloadType":      {Knob: WorkloadType},
			"maxRestarts":       {Knob: MaxRestarts},
			"maxRuntime":        {Knob: MaxRuntime},
			"scalingGroupDelay": {Knob: ScalingGroupTerminationDelay, Valid: CELScalingGroupDelaysValid, Item: CELScalingGroupDelay},
		},
		Tokens: map[string]func(suffix, obj string, s knob.FieldSchemas) string{"trainingSpec": celTrainingSpec},
	})
}
