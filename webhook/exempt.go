package webhook

import (
	"context"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// ExemptViolation is a violation a PolicyException exempts: found and
// audited (action Exempt), but neither denying nor warning as its rule's
// action would.
type ExemptViolation struct {
	Violation
	exceptions.Exemption
}

// ActionExempt is the audit action of an exempt violation. It is not a
// WorkloadPolicy action: no rule has it, an exception gives it.
const ActionExempt Action = "Exempt"

// SetExceptions gives the chain the PolicyExceptions in force; nil removes
// them all. Each evaluation reads their expiry against the chain's clock,
// so an expired exception stops exempting at once.
func (c *Chain) SetExceptions(s *exceptions.Set) {
	c.exceptions.Store(s)
	c.exceptionChanges.Add(1)
}

// Exceptions returns the exceptions the chain holds (nil: none).
func (c *Chain) Exceptions() *exceptions.Set { return c.exceptions.Load() }

// exempt moves the violations an exception exempts out of vs, and returns
// them. The labels of the request's namespace are read only when an
// exception in force names one of the violated rules.
func (c *Chain) exempt(ctx context.Context, req *Request, obj, old map[string]any, vs []Violation) ([]Violation, []ExemptViolation) {
	set := c.exceptions.Load()
	if set.Len() == 0 || len(vs) == 0 {
		return vs, nil
	}
	now := c.clock.Now()
	if !slices.ContainsFunc(vs, func(v Violation) bool { return set.Names(v.Rule, now) }) {
		return vs, nil
	}
	o := c.exemptionObject(ctx, req, obj, old)
	var kept []Violation
	var out []ExemptViolation
	for _, v := range vs {
		if v.Rule == RuleDecode || v.Rule == RuleSchema {
			kept = append(kept, v) // not rules an admin can exempt from
			continue
		}
		if e, ok := set.Exempt(v.Rule, o, now); ok {
			out = append(out, ExemptViolation{Violation: v, Exemption: e})
			continue
		}
		kept = append(kept, v)
	}
	return kept, out
}

// exemptDefaulters is the configuration the defaulters run with for this
// request: the chain's, with the defaulters an exception exempts the
// object from switched off.
func (c *Chain) exemptDefaulters(ctx context.Context, req *Request, obj, old map[string]any, kind string) celrules.Config {
	set := c.exceptions.Load()
	if set.Len() == 0 {
		return c.cfg
	}
	now := c.clock.Now()
	var ids []string
	for _, g := range goRules() {
		if g.Action == "Default" && slices.Contains(g.Kinds, kind) && set.Names(g.ID, now) {
			ids = append(ids, g.ID)
		}
	}
	if len(ids) == 0 {
		return c.cfg
	}
	o := c.exemptionObject(ctx, req, obj, old)
	cfg := c.cfg
	// A copy: the chain's own list is shared by every request.
	cfg.DisabledRules = slices.Clone(cfg.DisabledRules)
	for _, id := range ids {
		if _, ok := set.Exempt(id, o, now); ok {
			cfg.DisabledRules = append(cfg.DisabledRules, id)
		}
	}
	return cfg
}

// exemptionObject is what an exception selects on for req.
func (c *Chain) exemptionObject(ctx context.Context, req *Request, obj, old map[string]any) exceptions.Object {
	o := exceptions.Object{Namespaced: req.Namespace != ""}
	if obj != nil {
		o.Labels, _, _ = unstructured.NestedStringMap(obj, "metadata", "labels")
	}
	if old != nil {
		o.OldLabels, _, _ = unstructured.NestedStringMap(old, "metadata", "labels")
		if o.OldLabels == nil {
			o.OldLabels = map[string]string{}
		}
	}
	if o.Namespaced {
		// The apiserver labels every namespace with its name; a namespace
		// the lookups cannot find (offline, one not among the manifests)
		// is known by that label alone.
		o.NamespaceKnown, o.NamespaceLabels = true, map[string]string{corev1.LabelMetadataName: req.Namespace}
		if nl, ok := c.lookups.(NamespaceLookup); ok {
			if ns, err := nl.Namespace(ctx, req.Namespace); err == nil && ns != nil {
				o.NamespaceLabels = maps.Clone(ns.Labels)
				if o.NamespaceLabels == nil {
					o.NamespaceLabels = map[string]string{}
				}
				o.NamespaceLabels[corev1.LabelMetadataName] = req.Namespace
			}
		}
	}
	return o
}

// WithExempted lists v's violations, then the exempt ones with action
// Exempt: what `shepherd check` and `shepherd test` show and compare.
func (v *Verdict) WithExempted() []Violation {
	out := make([]Violation, 0, len(v.Violations)+len(v.Exempted))
	out = append(out, v.Violations...)
	for _, e := range v.Exempted {
		x := e.Violation
		x.Action = ActionExempt
		out = append(out, x)
	}
	return out
}

// ExemptWarningPrefix starts the warning of an exempt violation
// (exemptWarning).
const ExemptWarningPrefix = "exempt by PolicyException "

// exemptWarning tells the user their object broke a rule it is exempt
// from, and until when: the exemption may end before the object does.
func exemptWarning(e ExemptViolation) string {
	var b strings.Builder
	b.WriteString(ExemptWarningPrefix)
	b.WriteString(e.Exception)
	b.WriteString(" (")
	b.WriteString(e.Until())
	b.WriteString("): ")
	b.WriteString(warningText(e.Violation))
	return b.String()
}
