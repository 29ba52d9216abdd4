// Package register is Grove's integration as one import: the framework
// (package grove registers itself) and its controllers, gang termination
// (package gang) and Training PodCliqueSets (package training).
// integrations/all imports it.
package register

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	"github.com/shepherd-k8s/shepherd/integrations/grove/training"
)

func init() {
	integrations.RegisterController(integrations.Controller{Name: "gang", Frameworks: []string{integrations.Grove},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error {
			return gang.Setup(mgr, o.Clock, o.Enforcement)
		}})
	integrations.RegisterController(integrations.Controller{Name: "training", Frameworks: []string{integrations.Grove},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error { return training.Setup(mgr, o.Clock) }})
}
