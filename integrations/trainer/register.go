package trainer

import (
	"embed"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// rules are the framework's built-in CEL rules, beside it.
//
//go:embed rules/*.yaml
var rules embed.FS

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.Trainer, Group: api.TrainerGroup, Version: trainerv1alpha1.GroupVersion.Version,
		Kinds:     []string{api.KindTrainJob, api.KindTrainingRuntime, api.KindClusterTrainingRuntime},
		Resources: []string{"trainjobs", "trainingruntimes", "clustertrainingruntimes"},
		Rules:     rules,
		LookedUp:  []client.Object{NewRuntime(api.KindTrainingRuntime), NewRuntime(api.KindClusterTrainingRuntime), &trainerv1alpha1.TrainJob{}},
		Checks:    Checks,
		UpstreamEnforces: map[integrations.Feature]func(knob.FieldSchemas) (bool, string){
			integrations.FeatureDeadline: EnforcesDeadline,
		},
		// When a runtime's TTL was set (trainjob.TTLSince).
		KeepManagedFields: []client.Object{NewRuntime(api.KindTrainingRuntime), NewRuntime(api.KindClusterTrainingRuntime)},
		Knobs: map[string]integrations.KnobToken{
			"runtimeTTL":      {Knob: RuntimeTTL},
			"runtimeWorkload": {Knob: RuntimeWorkload},
		},
	})
}
