package reconcile

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
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
var controllers = []controller{}

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
