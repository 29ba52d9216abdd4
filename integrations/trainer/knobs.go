// Package trainer is shepherd's integration with Kubeflow Trainer: the seed
// knobs shepherd reads on Trainer's objects and their carriers, and whether
// Trainer itself already enforces a feature shepherd would otherwise
// enforce.
package trainer

import (
	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// Group is Trainer's API group.
const Group = "trainer.kubeflow.org"

var runtimeKinds = []string{api.KindTrainingRuntime, api.KindClusterTrainingRuntime}

// RuntimeTTL is a runtime's ttlSecondsAfterFinished (KEP-2899): how long a
// finished TrainJob of the runtime is kept. Trainer v2.3.0's runtime CRD
// has no such field, so there it is the annotation.
var RuntimeTTL = knob.Knob{
	Name: "ttlSecondsAfterFinished", Group: Group, Kinds: runtimeKinds,
	Path:       []string{"spec", "ttlSecondsAfterFinished"},
	Annotation: api.AnnotationTTLSecondsAfterFinished, Type: knob.Int,
}

// RuntimeWorkload is a runtime's podGroupPolicy.workload (KEP-3015): gang
// scheduling through the Workload API. Its carrier holds "workload".
var RuntimeWorkload = knob.Knob{
	Name: "podGroupPolicy.workload", Group: Group, Kinds: runtimeKinds,
	Path:       []string{"spec", "podGroupPolicy", "workload"},
	Annotation: api.AnnotationPodGroupPolicy, Type: knob.Presence, Value: api.PodGroupPolicyWorkload,
}

// Knobs are Trainer's seed knobs.
var Knobs = []knob.Knob{RuntimeTTL, RuntimeWorkload}
