package workload

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
)

// TrainJobs and their runtimes only; the Workload API is discovered
// (integrations.WorkloadAPIProbe).
func init() {
	integrations.RegisterController(integrations.Controller{Name: "workload", Frameworks: []string{integrations.Trainer},
		New: func(mgr ctrl.Manager, o integrations.ControllerOptions) error {
			return Setup(mgr, o.Clock, o.WorkloadAPI)
		}})
}
