// Package integrations is the integration interface, the way Kueue's
// jobframework is: a Framework (its group, the kinds whose CRDs must be
// served, its CEL rule files, defaults, knobs, Go checks and the objects
// they look up, which features its upstream operator enforces) and a
// Controller (its reconciler and the frameworks it needs), registered from
// the init of each framework's packages beneath this one: the framework's
// own (integrations/trainer, integrations/jobset, integrations/grove) and,
// for one with controllers, its register package, which imports the
// framework and its controllers (integrations/trainer/register,
// integrations/grove/register); integrations/all imports one package per
// framework, plus integrations/workload (a controller of its own). webhook,
// celrules and serve iterate the registry and name no framework.
// It also detects which frameworks' CRDs the cluster serves (Decide,
// Watcher) and whether it serves the Workload API (WorkloadAPIProbe).
//
// Frameworks come and go: a framework whose CRDs are not established is
// skipped — its reconcilers and lookup informers do not start and readiness
// does not wait for it — and is picked up without a restart once they are,
// the way Kueue's jobframework enables an integration only when its CRDs are
// served. Each framework has a Mode (auto|on|off); Decide is the pure
// decision, Watcher applies it to a running manager.
package integrations

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// Framework names: the --framework-<name> flags, the framework label of
// shepherd_framework_active, and the keys of a Watcher's modes.
const (
	Trainer = "trainer"
	JobSet  = "jobset"
	Grove   = "grove"
)

// Framework is one framework shepherd integrates with: its API group, the
// version shepherd's Go types read, and the kinds whose CRDs must all be
// established before it is active.
type Framework struct {
	Name  string
	Group string
	// Version must be served by every kind's CRD: shepherd's informers read
	// that version, and an informer of an unserved version never syncs.
	Version string
	Kinds   []string
	// Resources are the plural resources of Kinds, in their order: what
	// shepherd's webhook configurations name (deploy/webhook) and so what
	// a WorkloadPolicy may match (celrules.WebhookKinds).
	Resources []string
	// LookedUp are the objects of its kinds the Go checks look up (a
	// TrainJob's runtime, a JobSet's TrainJob, a PodClique's
	// PodCliqueSet): their informers start once the framework is active.
	LookedUp []client.Object
	// Checks are the rules the integration writes in Go (gocheck): the
	// admission chain runs them without naming a framework.
	Checks []gocheck.Check
	// Defaults are its defaulting rules, each defined once as the
	// MutatingAdmissionPolicy it exports as (mapdefault).
	Defaults []mapdefault.Rule
	// UpstreamEnforces decides, from the schemas the cluster serves,
	// whether the framework's own operator enforces a lifecycle feature
	// (and why): shepherd then stands down (Enforcement.SetUpstream). A
	// feature decided per object (gang termination) is not here.
	UpstreamEnforces map[Feature]func(s knob.FieldSchemas) (bool, string)
	// KeepManagedFields are the kinds whose managedFields a controller's
	// decision reads: the cache keeps them on these (and drops them on
	// every other kind, where nothing reads them).
	KeepManagedFields []client.Object
	// Rules holds its built-in CEL rules: rules/*.yaml, one file per kind,
	// each a list of rules in the WorkloadPolicy format plus an id
	// (celrules.BuiltinRules reads them).
	Rules fs.FS
	// Knobs are the seed knobs its built-in rules read, by the token that
	// names each in the rule files ($(name), celrules/knobs.go).
	Knobs map[string]KnobToken
	// Tokens are the rule files' tokens that stand for more than one knob
	// ($(name) and $(name.paths)): given the suffix ("" or ".paths"), the
	// object's CEL name and the schemas, the CEL it expands to.
	Tokens map[string]func(suffix, obj string, s knob.FieldSchemas) string
}

// KnobToken is a knob as the built-in rules read it.
type KnobToken struct {
	Knob knob.Knob
	// Valid replaces Knob.CELValid for $(name.valid) when set: a knob whose
	// carrier holds several entries.
	Valid func(f knob.Form, obj string) string
	// Item is $(name:v) when set: the raw value (optional<string>) of the
	// list item bound to the CEL variable v, for a knob set per item.
	Item func(f knob.Form, obj, item string) string
	// Expect replaces Knob.ValidDescription for $(name.expect) when set:
	// what a well-formed carrier of several entries holds.
	Expect string
}

// LookupObjects are the kinds the Go checks look up, by the framework that
// serves them (Framework.LookedUp); "" holds the built-in kinds, always
// served: the request's Namespace, for WorkloadPolicies'
// namespaceSelector.
func LookupObjects() map[string][]client.Object {
	out := map[string][]client.Object{"": {&corev1.Namespace{}}}
	for _, f := range Frameworks {
		if len(f.LookedUp) > 0 {
			out[f.Name] = f.LookedUp
		}
	}
	return out
}

// Lookup returns the framework named name.
func Lookup(name string) (Framework, bool) {
	i := slices.IndexFunc(Frameworks, func(f Framework) bool { return f.Name == name })
	if i < 0 {
		return Framework{}, false
	}
	return Frameworks[i], true
}

// Of returns the framework serving group, if any.
func Of(group string) (Framework, bool) {
	i := slices.IndexFunc(Frameworks, func(f Framework) bool { return f.Group == group })
	if i < 0 {
		return Framework{}, false
	}
	return Frameworks[i], true
}

// Mode says when a framework starts. It implements pflag.Value.
type Mode string

const (
	// ModeAuto starts the framework once all its CRDs are established,
	// whenever that is, and skips it until then.
	ModeAuto Mode = "auto"
	// ModeOn requires the framework: serve fails at start, naming the
	// missing CRDs, when they are not established. Failing fast (rather
	// than waiting) makes a missing install an error the operator sees,
	// not a replica that never does its job.
	ModeOn Mode = "on"
	// ModeOff never starts the framework, whatever the cluster serves.
	ModeOff Mode = "off"
)

// Modes lists the valid modes, for help texts and errors.
var Modes = []Mode{ModeAuto, ModeOn, ModeOff}

// ParseMode parses auto, on or off.
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Modes, m) {
		return "", fmt.Errorf("invalid framework mode %q: want auto, on or off", s)
	}
	return m, nil
}

// String implements pflag.Value.
func (m *Mode) String() string { return string(*m) }

// Set implements pflag.Value.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type implements pflag.Value.
func (m *Mode) Type() string { return "auto|on|off" }

// Decision is what Decide concluded about one framework.
type Decision struct {
	Framework string
	Mode      Mode
	// Served: every kind's CRD is established and serves the framework's
	// version.
	Served bool
	// Missing names, as Kind.group, the kinds whose CRD is absent, not
	// established, being deleted or not serving the version.
	Missing []string
	// Start: the framework should run (Served, and Mode is not off).
	Start bool
}

// Decide says, for every framework in Frameworks order, whether it should
// run given its mode (absent from modes: auto) and the cluster's CRDs. It
// is pure: a framework already running stays running (controllers cannot be
// removed from a manager) — that is the Watcher's business, not this.
func Decide(modes map[string]Mode, crds []*apiextensionsv1.CustomResourceDefinition) []Decision {
	out := make([]Decision, 0, len(Frameworks))
	for _, f := range Frameworks {
		mode := modes[f.Name]
		if mode == "" {
			mode = ModeAuto
		}
		d := Decision{Framework: f.Name, Mode: mode}
		for _, kind := range f.Kinds {
			if !slices.ContainsFunc(crds, func(c *apiextensionsv1.CustomResourceDefinition) bool { return serves(c, f, kind) }) {
				d.Missing = append(d.Missing, schema.GroupKind{Group: f.Group, Kind: kind}.String())
			}
		}
		d.Served = len(d.Missing) == 0
		d.Start = d.Served && mode != ModeOff
		out = append(out, d)
	}
	return out
}

// serves reports whether crd is kind's CRD of f, established, not being
// deleted and serving f.Version.
func serves(crd *apiextensionsv1.CustomResourceDefinition, f Framework, kind string) bool {
	if crd.Spec.Group != f.Group || crd.Spec.Names.Kind != kind || crd.DeletionTimestamp != nil || !Established(crd) {
		return false
	}
	return slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == f.Version && v.Served
	})
}

// Established reports whether crd has the condition Established=True: the
// apiserver serves its resources.
func Established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}
