package grove

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
)

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.Grove, Group: api.GroveGroup, Version: grovev1alpha1.GroupVersion.Version,
		Kinds:    []string{api.KindPodCliqueSet, api.KindPodClique, api.KindPodCliqueScalingGroup},
		LookedUp: []client.Object{&grovev1alpha1.PodCliqueSet{}},
		Checks:   Checks,
	})
}
