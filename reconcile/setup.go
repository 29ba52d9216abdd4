package reconcile

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/reconcile/gang"
	"github.com/shepherd-k8s/shepherd/reconcile/training"
	"github.com/shepherd-k8s/shepherd/reconcile/trainjob"
	"github.com/shepherd-k8s/shepherd/reconcile/workload"
)

// Options configures every controller.
type Options struct {
	// Clock is the clock every decision is made with; tests inject a fake.
	Clock clock.PassiveClock
}

// controller is one controller's registration.
type controller struct {
	name  string
	setup func(mgr ctrl.Manager, opts Options) error
}

// controllers lists every controller SetupAll starts, in order. Each
// controller package's Setup is added here.
var controllers = []controller{
	{name: "trainjob", setup: func(mgr ctrl.Manager, o Options) error { return trainjob.Setup(mgr, o.Clock) }},
	{name: "workload", setup: func(mgr ctrl.Manager, o Options) error { return workload.Setup(mgr, o.Clock) }},
	{name: "gang", setup: func(mgr ctrl.Manager, o Options) error { return gang.Setup(mgr, o.Clock) }},
	{name: "training", setup: func(mgr ctrl.Manager, o Options) error { return training.Setup(mgr, o.Clock) }},
}

// SetupAll registers every controller with mgr.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	for _, c := range controllers {
		if err := c.setup(mgr, opts); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", c.name, err)
		}
	}
	return nil
}
