package reconcile

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
	"github.com/shepherd-k8s/shepherd/reconcile/training"
	"github.com/shepherd-k8s/shepherd/reconcile/trainjob"
	"github.com/shepherd-k8s/shepherd/reconcile/workload"
)

// Options configures every controller.
type Options struct {
	// Clock is the clock every decision is made with; tests inject a fake.
	Clock clock.PassiveClock
	// Enforcement decides which lifecycle features the upstream operators
	// enforce themselves (nil: shepherd enforces every one).
	Enforcement *integrations.Enforcement
	// Schemas answers which fields the served schemas have, which decides
	// where knobs and status are carried (nil: the carrier annotations).
	Schemas knob.FieldSchemas
	// WorkloadAPI says which scheduling.k8s.io version serves Workloads and
	// PodGroups (serve's integrations.WorkloadAPIProbe); nil asks discovery
	// at every reconcile that needs it.
	WorkloadAPI func() (version string, ok bool, err error)
}

// Controller is one controller's registration.
type Controller struct {
	Name string
	// Frameworks are the integrations whose kinds the controller watches:
	// it can start only once all of them are active, since an informer of
	// a kind the apiserver does not serve never syncs.
	Frameworks []string
	setup      func(mgr ctrl.Manager, opts Options) error
}

// Controllers lists every controller, in the order SetupAll starts them.
// Each controller package's Setup is added here.
func Controllers() []Controller {
	return []Controller{
		// The TrainJob's JobSet is watched (and deleted at the deadline).
		{Name: "trainjob", Frameworks: []string{integrations.Trainer, integrations.JobSet},
			setup: func(mgr ctrl.Manager, o Options) error { return trainjob.Setup(mgr, o.Clock, o.Enforcement) }},
		// TrainJobs and their runtimes only; the Workload API is discovered.
		{Name: "workload", Frameworks: []string{integrations.Trainer},
			setup: func(mgr ctrl.Manager, o Options) error { return workload.Setup(mgr, o.Clock, o.WorkloadAPI) }},
		{Name: "gang", Frameworks: []string{integrations.Grove},
			setup: func(mgr ctrl.Manager, o Options) error { return gang.Setup(mgr, o.Clock, o.Enforcement) }},
		{Name: "training", Frameworks: []string{integrations.Grove},
			setup: func(mgr ctrl.Manager, o Options) error { return training.Setup(mgr, o.Clock) }},
	}
}

// Setup registers c with mgr, which may already be running: the controller
// then starts at once, or when this replica becomes the leader.
func (c Controller) Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := c.setup(mgr, opts); err != nil {
		return fmt.Errorf("setting up the %s controller: %w", c.Name, err)
	}
	return nil
}

// SetupAll registers every controller with mgr, as if every framework were
// installed.
func SetupAll(mgr ctrl.Manager, opts Options) error {
	for _, c := range Controllers() {
		if err := c.Setup(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}
