package workload

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// GroupTemplate is one podGroupTemplate of a TrainJob's Workload.
type GroupTemplate struct {
	// Name is api.PodGroupTemplateTrainer or api.PodGroupTemplateInitializer.
	Name string
	// Gang: all MinCount pods are scheduled together, or none; otherwise the
	// basic policy (pods scheduled one by one).
	Gang     bool
	MinCount int32
}

// Plan is the Workload a TrainJob needs.
type Plan struct {
	// Templates, initializer (when present) first, then trainer.
	Templates []GroupTemplate
}

// PlanFor says which podGroupTemplates the TrainJob tj on the runtime rt (a
// TrainingRuntime or ClusterTrainingRuntime) needs. ok is false when the
// runtime does not use the Workload API — neither podGroupPolicy.workload
// nor its carrier annotation (trainer.UsesWorkload) — then nothing is to
// be created.
func PlanFor(tj *trainerv1alpha1.TrainJob, rt *unstructured.Unstructured) (plan Plan, ok bool) {
	if _, isRuntime := trainer.RuntimeKind(rt); !isRuntime || !trainer.UsesWorkload(rt) {
		return Plan{}, false
	}
	hasInitializer := false
	for _, rj := range trainer.RuntimeJobs(rt) {
		if api.PodGroupTemplateFor(rj.Name, rj.Labels) == api.PodGroupTemplateInitializer {
			hasInitializer = true
		}
	}
	if hasInitializer {
		// Initializers run before training, one pod each; gang-scheduling
		// them would only delay the lazy model and dataset downloads.
		plan.Templates = append(plan.Templates, GroupTemplate{Name: api.PodGroupTemplateInitializer})
	}
	plan.Templates = append(plan.Templates, GroupTemplate{
		Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: trainerNodes(tj, rt),
	})
	return plan, true
}

// trainerNodes is the trainer gang's size: the TrainJob's trainer.numNodes,
// else the runtime's mlPolicy.numNodes, else 1 (Trainer's own default). An
// MPI launcher counts among these nodes: it shares the trainer gang.
func trainerNodes(tj *trainerv1alpha1.TrainJob, rt *unstructured.Unstructured) int32 {
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.NumNodes != nil {
		return *tj.Spec.Trainer.NumNodes
	}
	if n, ok := trainer.RuntimeNodes(rt); ok {
		return n
	}
	return 1
}
