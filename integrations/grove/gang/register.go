package gang

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
)

func init() {
	integrations.RegisterController(integrations.Controller{Name: "gang", Frameworks: []string{integrations.Grove},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error {
			return Setup(mgr, o.Clock, o.Enforcement)
		}})
}
