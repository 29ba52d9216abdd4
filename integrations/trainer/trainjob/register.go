package trainjob

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
)

// The TrainJob's JobSet is watched (and deleted at the deadline).
func init() {
	integrations.RegisterController(integrations.Controller{Name: "trainjob", Frameworks: []string{integrations.Trainer, integrations.JobSet},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error {
			return Setup(mgr, o.Clock, o.Enforcement)
		}})
}
