package grove

import (
	"embed"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// rules are the framework's built-in CEL rules, beside it.
//
//go:embed rules/*.yaml
var rules embed.FS

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.Grove, Group: api.GroveGroup, Version: grovev1alpha1.GroupVersion.Version,
		Kinds:     []string{api.KindPodCliqueSet, api.KindPodClique, api.KindPodCliqueScalingGroup},
		Resources: []string{"podcliquesets", "podcliques", "podcliquescalinggroups"},
		Rules:     rules,
		LookedUp:  []client.Object{NewObject(api.KindPodCliqueSet)},
		Checks:    Checks,
		// Who writes MinAvailableBreached (gang.Sign).
		KeepManagedFields: []client.Object{NewObject(api.KindPodClique), NewObject(api.KindPodCliqueScalingGroup)},
		Defaults:          Defaults,
		Knobs: map[string]integrations.KnobToken{
			"workloadType":      {Knob: WorkloadType},
			"maxRestarts":       {Knob: MaxRestarts},
			"maxRuntime":        {Knob: MaxRuntime},
			"scalingGroupDelay": {Knob: ScalingGroupTerminationDelay, Valid: CELScalingGroupDelaysValid, Item: CELScalingGroupDelay, Expect: DelayCarrierExpect},
		},
		Tokens: map[string]func(suffix, obj string, s knob.FieldSchemas) string{"trainingSpec": celTrainingSpec},
	})
}
