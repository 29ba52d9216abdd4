package celrules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWebhookKindsAreTheFrameworks: the kinds a rule may match come from
// the registered frameworks, each with its plural resource, in the
// frameworks' order; adding a framework adds its kinds here.
func TestWebhookKindsAreTheFrameworks(t *testing.T) {
	want := []ScopedKind{
		{schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"}, "trainjobs"},
		{schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainingRuntime"}, "trainingruntimes"},
		{schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "ClusterTrainingRuntime"}, "clustertrainingruntimes"},
		{schema.GroupKind{Group: "jobset.x-k8s.io", Kind: "JobSet"}, "jobsets"},
		{schema.GroupKind{Group: "grove.io", Kind: "PodCliqueSet"}, "podcliquesets"},
		{schema.GroupKind{Group: "grove.io", Kind: "PodClique"}, "podcliques"},
		{schema.GroupKind{Group: "grove.io", Kind: "PodCliqueScalingGroup"}, "podcliquescalinggroups"},
	}
	if diff := cmp.Diff(want, WebhookKinds); diff != "" {
		t.Errorf("WebhookKinds (-want +got):\n%s", diff)
	}
}
