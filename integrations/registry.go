package integrations

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// Frameworks are the registered frameworks, in names order (Trainer,
// JobSet, Grove): the order of flags, metrics and readiness messages. The
// registry is filled by the frameworks' init functions and read only after
// them; it is not guarded.
var Frameworks []Framework

// controllers are the registered controllers, by name.
var controllers []Controller

// names fixes the frameworks' order whatever order their packages are
// initialised in.
var names = []string{Trainer, JobSet, Grove}

// Register adds f to Frameworks. Each framework's package calls it from
// init; a second registration of one name is a programming error.
func Register(f Framework) {
	if _, ok := Lookup(f.Name); ok {
		panic(fmt.Sprintf("integrations: framework %q registered twice", f.Name))
	}
	if len(f.Resources) != len(f.Kinds) {
		panic(fmt.Sprintf("integrations: framework %q has %d kinds and %d resources", f.Name, len(f.Kinds), len(f.Resources)))
	}
	Frameworks = append(Frameworks, f)
	slices.SortStableFunc(Frameworks, func(a, b Framework) int { return rank(a.Name) - rank(b.Name) })
}

func rank(name string) int {
	if i := slices.Index(names, name); i >= 0 {
		return i
	}
	return len(names)
}

// ControllerOptions configures every controller.
type ControllerOptions struct {
	// Clock is the clock every decision is made with; tests inject a fake.
	Clock clock.PassiveClock
	// Enforcement decides which lifecycle features the upstream operators
	// enforce themselves (nil: shepherd enforces every one).
	Enforcement *Enforcement
	// Schemas answers which fields the served schemas have, which decides
	// where knobs and status are carried (nil: the carrier annotations).
	Schemas knob.FieldSchemas
	// WorkloadAPI says which scheduling.k8s.io version serves Workloads and
	// PodGroups (serve's WorkloadAPIProbe); nil asks discovery at every
	// reconcile that needs it.
	WorkloadAPI func() (version string, ok bool, err error)
}

// Controller is one controller's registration.
type Controller struct {
	Name string
	// Frameworks are the integrations whose kinds the controller watches:
	// it can start only once all of them are active, since an informer of
	// a kind the apiserver does not serve never syncs.
	Frameworks []string
	// New registers the controller with a manager, which may already be
	// running: the controller then starts at once.
	New func(mgr ctrl.Manager, opts ControllerOptions) error
}

// RegisterController adds c to Controllers; its framework's register
// package (or, for a framework that is a controller alone, its package)
// calls it from init.
func RegisterController(c Controller) {
	if slices.ContainsFunc(controllers, func(o Controller) bool { return o.Name == c.Name }) {
		panic(fmt.Sprintf("integrations: controller %q registered twice", c.Name))
	}
	controllers = append(controllers, c)
	slices.SortFunc(controllers, func(a, b Controller) int { return strings.Compare(a.Name, b.Name) })
}

// Controllers lists the registered controllers by name.
func Controllers() []Controller { return slices.Clone(controllers) }

// Setup registers c with mgr, which may already be running: the controller
// then starts at once, or when this replica becomes the leader.
func (c Controller) Setup(mgr ctrl.Manager, opts ControllerOptions) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := c.New(mgr, opts); err != nil {
		return fmt.Errorf("setting up the %s controller: %w", c.Name, err)
	}
	return nil
}

// Checks are the registered frameworks' Go checks.
func Checks() []gocheck.Check {
	var out []gocheck.Check
	for _, f := range Frameworks {
		out = append(out, f.Checks...)
	}
	return out
}

// Defaults are the registered frameworks' defaulting rules, in framework
// order.
func Defaults() []mapdefault.Rule {
	var out []mapdefault.Rule
	for _, f := range Frameworks {
		out = append(out, f.Defaults...)
	}
	return out
}

// Knobs are the registered frameworks' knob tokens, by name.
func Knobs() map[string]KnobToken {
	out := map[string]KnobToken{}
	for _, f := range Frameworks {
		maps.Copy(out, f.Knobs)
	}
	return out
}

// Tokens are the registered frameworks' multi-knob tokens, by name.
func Tokens() map[string]func(suffix, obj string, s knob.FieldSchemas) string {
	out := map[string]func(suffix, obj string, s knob.FieldSchemas) string{}
	for _, f := range Frameworks {
		maps.Copy(out, f.Tokens)
	}
	return out
}

// KeepsManagedFields reports whether obj is of a kind whose managedFields
// a registered framework's controller reads (Framework.KeepManagedFields):
// the same Go type, or for an object read as served (unstructured) the
// same group and kind.
func KeepsManagedFields(obj any) bool {
	t := reflect.TypeOf(obj)
	u, served := obj.(*unstructured.Unstructured)
	for _, f := range Frameworks {
		for _, k := range f.KeepManagedFields {
			if reflect.TypeOf(k) != t {
				continue
			}
			if !served {
				return true
			}
			if ku, ok := k.(*unstructured.Unstructured); ok && u != nil && ku.GroupVersionKind().GroupKind() == u.GroupVersionKind().GroupKind() {
				return true
			}
		}
	}
	return false
}

// SetUpstreamFrom takes every registered framework's "does upstream enforce
// it" decision again from the schemas the cluster serves.
func (e *Enforcement) SetUpstreamFrom(s knob.FieldSchemas) {
	for _, f := range Frameworks {
		for feature, decide := range f.UpstreamEnforces {
			upstream, why := decide(s)
			e.SetUpstream(feature, upstream, why)
		}
	}
}
