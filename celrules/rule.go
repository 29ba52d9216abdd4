package celrules

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Rule is one CEL rule: a built-in rule (docs/rules.md) or an admin's
// WorkloadPolicy. Its body is exactly a WorkloadPolicy spec, so built-in rule
// files and WorkloadPolicy objects share one format.
type Rule struct {
	// ID names the rule in violations: "V-TJ-1", or a WorkloadPolicy's name.
	ID string `json:"id"`
	// Description says what the rule enforces, for `shepherd export rules`.
	Description string `json:"description,omitempty"`
	// Upstream is the evidence that the layer in front of shepherd on a
	// cluster (the served CRD, an upstream webhook) enforces the whole rule
	// (UpstreamState.Enforced); built-in rules only.
	Upstream []Upstream `json:"upstream,omitempty"`

	shepherdv1alpha1.WorkloadPolicySpec `json:",inline"`
}

// Source says where a rule comes from.
type Source string

const (
	// SourceBuiltin is a rule of the embedded library.
	SourceBuiltin Source = "built-in"
	// SourcePolicy is an admin's WorkloadPolicy.
	SourcePolicy Source = "WorkloadPolicy"
	// SourceGo is a check written in Go (lookups, discovery, defaulting).
	SourceGo Source = "go"
)

// RuleInfo describes a rule for listings (`shepherd export rules`).
type RuleInfo struct {
	ID          string   `json:"id"`
	Kinds       []string `json:"kinds"`
	Action      string   `json:"action"`
	Exportable  bool     `json:"exportable"`
	Reason      string   `json:"reason,omitempty"`
	Source      Source   `json:"source"`
	Description string   `json:"description,omitempty"`
	Enabled     bool     `json:"enabled"`
	// Inactive, for a built-in rule, says why it is not enforced although
	// enabled: it does not type-check against the schemas the target
	// cluster serves (a field the served CRD lacks).
	Inactive string `json:"inactive,omitempty"`
	// EnforcedUpstream says who else enforces the whole rule on the target
	// cluster, before or beside shepherd (its Upstream evidence holds):
	// serve then leaves it to them (Inactive says so); check and export,
	// which have no upstream in front, keep judging it and name it.
	EnforcedUpstream string `json:"enforcedUpstream,omitempty"`
	// OnUpdate names the parts of the object ("spec", "metadata.labels")
	// an UPDATE must change for the rule to judge it, or OnUpdateAlways
	// (UpdateConditionName).
	OnUpdate string `json:"onUpdate"`
}

// Config switches built-in behaviour on and off. The zero value is the
// shipped default: every rule on, D-JS-2 rewriting, no default
// terminationDelay for Inference PodCliqueSets.
type Config struct {
	// DisabledRules are rule IDs (V-*, D-*) that are switched off.
	DisabledRules []string `json:"disabledRules,omitempty"`
	// DisableStartupPolicyRewrite switches D-JS-2 off: an
	// InOrder startupPolicy is left as it is (V-JS-5 still warns).
	DisableStartupPolicyRewrite bool `json:"disableStartupPolicyRewrite,omitempty"`
	// InferenceTerminationDelay is D-PCS-5's default for Inference
	// PodCliqueSets; nil leaves terminationDelay unset (gang termination
	// stays opt-in).
	InferenceTerminationDelay *metav1.Duration `json:"inferenceTerminationDelay,omitempty"`
	// Schemas are the schemas rules are type-checked against: the target
	// cluster's. Nil: the pinned upstream schemas (PinnedSchemas).
	Schemas *Schemas `json:"-"`
	// Namespace is shepherd's own namespace, which exported bindings leave
	// out as its webhooks do; empty means api.DefaultNamespace.
	Namespace string `json:"-"`
	// StandDown makes a rule whose whole verdict the cluster's CRD or a
	// registered upstream webhook already gives inactive (serve: never
	// enforce twice). check and export leave it off: they judge with no
	// upstream in front.
	StandDown bool `json:"-"`
	// OwnWebhooks are shepherd's own webhook configuration names, which
	// are never evidence of an upstream webhook.
	OwnWebhooks []string `json:"-"`
}

// Enabled reports whether rule id is switched on.
func (c Config) Enabled(id string) bool { return !slices.Contains(c.DisabledRules, id) }

// RuleFromPolicy turns a WorkloadPolicy into a rule named after it.
func RuleFromPolicy(p *shepherdv1alpha1.WorkloadPolicy) Rule {
	return Rule{ID: p.Name, WorkloadPolicySpec: *p.Spec.DeepCopy()}
}

func (r *Rule) action() shepherdv1alpha1.Action {
	if r.Action == "" {
		return shepherdv1alpha1.ActionDeny
	}
	return r.Action
}

func (r *Rule) failurePolicy() shepherdv1alpha1.FailurePolicy {
	if r.FailurePolicy == "" {
		return shepherdv1alpha1.FailurePolicyFail
	}
	return r.FailurePolicy
}

// groupKinds lists the group/kind pairs a rule matches by kind.
func (r *Rule) groupKinds() []schema.GroupKind {
	var out []schema.GroupKind
	for _, rr := range r.Match.Resources {
		for _, g := range rr.APIGroups {
			for _, k := range rr.Kinds {
				if gk := (schema.GroupKind{Group: g, Kind: k}); !slices.Contains(out, gk) {
					out = append(out, gk)
				}
			}
		}
	}
	return out
}

// kinds lists the kinds a rule matches, for listings.
func (r *Rule) kinds() []string {
	var out []string
	for _, rr := range r.Match.Resources {
		for _, k := range rr.Kinds {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		for _, res := range rr.Resources {
			if !slices.Contains(out, res) {
				out = append(out, res)
			}
		}
	}
	return out
}
