// Package register is Kubeflow Trainer's integration as one import: the
// framework (package trainer registers itself) and its controller, the
// TrainJob deadline and TTL (package trainjob). integrations/all imports
// it.
package register

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/integrations/trainer/trainjob"
)

// The TrainJob's JobSet is watched (and deleted at the deadline): the
// controller needs JobSet too.
func init() {
	integrations.RegisterController(integrations.Controller{Name: "trainjob", Frameworks: []string{integrations.Trainer, integrations.JobSet},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error {
			return trainjob.Setup(mgr, o.Clock, o.Enforcement)
		}})
}
