package celrules

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Upstream is one piece of evidence that a layer in front of shepherd
// enforces a rule on the target cluster, so that the rule can never decide
// there (docs/concepts.md, "Who enforces what"): the served CRD's own
// schema, which the apiserver applies before any webhook, or an upstream
// validating webhook, called in parallel with shepherd's for the same
// requests. A rule stands down only when every piece of its evidence
// holds, and only where the evidence covers the whole rule: a CRD
// transition rule (self == oldSelf) is not evidence for an immutability
// rule that also forbids adding or removing the field, which the apiserver
// does not check.
type Upstream struct {
	CRD     *CRDEvidence     `json:"crd,omitempty"`
	Webhook *WebhookEvidence `json:"webhook,omitempty"`
}

// CRDEvidence holds when every served version of the kind's schema has, at
// Path, everything it names: Minimum (a minimum at least this one), Enum
// (an enum of only these values) and Rule (an x-kubernetes-validations
// rule with this text, whitespace aside).
type CRDEvidence struct {
	// Path is the field, dotted from the object's root ("spec" for a rule
	// on the spec itself).
	Path    string   `json:"path"`
	Minimum *int64   `json:"minimum,omitempty"`
	Enum    []string `json:"enum,omitempty"`
	Rule    string   `json:"rule,omitempty"`
}

// WebhookEvidence holds when a validating webhook of this Name (the name
// the upstream project gives it; configurations are named by each
// install) is registered, outside shepherd's own configurations, with
// failurePolicy Fail, a rule covering the kind's resource and Operation,
// and no selector or matchCondition narrowing it: the apiserver then calls
// it for every such request, and a webhook that cannot be reached rejects
// it rather than letting it through.
type WebhookEvidence struct {
	Name      string `json:"name"`
	Operation string `json:"operation"`
}

// UpstreamState is what the evidence is judged against: the schemas the
// cluster serves and its validating webhook configurations.
type UpstreamState struct {
	Schemas  *Schemas
	Webhooks []admissionregistrationv1.ValidatingWebhookConfiguration
	// Own are shepherd's own configuration names, never evidence.
	Own []string
}

// Enforced reports whether every piece of ev holds for kind gk, and says
// by whom in words ("the CRD: ...; webhook ..."); false when ev is empty
// or any piece does not hold. Webhook evidence needs webhooks: offline
// (check, export) there are none, and such a rule never stands down.
func (u UpstreamState) Enforced(gk schema.GroupKind, ev []Upstream) (string, bool) {
	if len(ev) == 0 {
		return "", false
	}
	var why []string
	for _, e := range ev {
		var w string
		var ok bool
		switch {
		case e.CRD != nil:
			w, ok = u.crdHolds(gk, *e.CRD)
		case e.Webhook != nil:
			w, ok = u.webhookHolds(gk, *e.Webhook)
		}
		if !ok {
			return "", false
		}
		why = append(why, w)
	}
	return strings.Join(why, "; "), true
}

// EnforcedAll is Enforced for a rule on several kinds: every kind must
// hold its evidence.
func (u UpstreamState) EnforcedAll(gks []schema.GroupKind, ev []Upstream) (string, bool) {
	if len(gks) == 0 {
		return "", false
	}
	var why []string
	for _, gk := range gks {
		w, ok := u.Enforced(gk, ev)
		if !ok {
			return "", false
		}
		why = append(why, w)
	}
	return strings.Join(slices.Compact(why), "; "), true
}

func (u UpstreamState) crdHolds(gk schema.GroupKind, e CRDEvidence) (string, bool) {
	if u.Schemas == nil {
		return "", false
	}
	versions := u.Schemas.kinds[gk].versions
	if len(versions) == 0 {
		return "", false
	}
	for _, v := range versions {
		st := structuralAt(u.Schemas.structural[gk.WithVersion(v)], strings.Split(e.Path, "."))
		if st == nil {
			return "", false
		}
		if e.Minimum != nil {
			vv := st.ValueValidation
			if vv == nil || vv.Minimum == nil {
				return "", false
			}
			least := *vv.Minimum
			if vv.ExclusiveMinimum {
				least++ // integers: > m is >= m+1
			}
			if least < float64(*e.Minimum) {
				return "", false
			}
		}
		if len(e.Enum) > 0 && !enumWithin(st.ValueValidation, e.Enum) {
			return "", false
		}
		if e.Rule != "" && !slices.ContainsFunc(st.XValidations, func(r apiextensionsv1.ValidationRule) bool { return sameRule(r.Rule, e.Rule) }) {
			return "", false
		}
	}
	var what []string
	if e.Minimum != nil {
		what = append(what, fmt.Sprintf("minimum %d", *e.Minimum))
	}
	if len(e.Enum) > 0 {
		what = append(what, fmt.Sprintf("enum %v", e.Enum))
	}
	if e.Rule != "" {
		what = append(what, fmt.Sprintf("rule %q", e.Rule))
	}
	return fmt.Sprintf("the %s CRD (%s on %s; the apiserver checks its schema before any webhook)", gk.Kind, strings.Join(what, ", "), e.Path), true
}

// enumWithin reports whether vv has an enum and every value of it is in
// allowed.
func enumWithin(vv *structuralschema.ValueValidation, allowed []string) bool {
	if vv == nil || len(vv.Enum) == 0 {
		return false
	}
	for _, v := range vv.Enum {
		s, ok := v.Object.(string)
		if !ok || !slices.Contains(allowed, s) {
			return false
		}
	}
	return true
}

func (u UpstreamState) webhookHolds(gk schema.GroupKind, e WebhookEvidence) (string, bool) {
	resource := ""
	if u.Schemas != nil {
		resource = u.Schemas.Resource(gk)
	}
	if resource == "" {
		return "", false
	}
	for _, cfg := range u.Webhooks {
		if slices.Contains(u.Own, cfg.Name) {
			continue
		}
		for _, h := range cfg.Webhooks {
			if h.Name != e.Name || h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail ||
				!selectsAll(h.NamespaceSelector) || !selectsAll(h.ObjectSelector) || len(h.MatchConditions) > 0 {
				continue
			}
			if covers(h.Rules, gk.Group, resource, admissionregistrationv1.OperationType(e.Operation)) {
				return fmt.Sprintf("webhook %s of ValidatingWebhookConfiguration %s (called with shepherd's for every %s of %s; failurePolicy Fail)", h.Name, cfg.Name, e.Operation, resource), true
			}
		}
	}
	return "", false
}

// selectsAll reports whether a webhook's selector lets every object through
// (the apiserver defaults an unset one to {}).
func selectsAll(sel *metav1.LabelSelector) bool {
	return sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0)
}

// covers reports whether rules send operation on group/resource to the
// webhook.
func covers(rules []admissionregistrationv1.RuleWithOperations, group, resource string, op admissionregistrationv1.OperationType) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, "*") || slices.Contains(list, v) }
	for _, r := range rules {
		ops := make([]string, 0, len(r.Operations))
		for _, o := range r.Operations {
			ops = append(ops, string(o))
		}
		if has(ops, string(op)) && has(r.APIGroups, group) && has(r.Resources, resource) {
			return true
		}
	}
	return false
}

// structuralAt walks a structural schema down path.
func structuralAt(st *structuralschema.Structural, path []string) *structuralschema.Structural {
	for _, p := range path {
		if st == nil {
			return nil
		}
		next, ok := st.Properties[p]
		if !ok {
			return nil
		}
		st = &next
	}
	return st
}

// sameRule compares two CEL rule texts, whitespace aside.
func sameRule(a, b string) bool {
	return strings.Join(strings.Fields(a), "") == strings.Join(strings.Fields(b), "")
}

// Judges reports whether any rule in force — a built-in rule that is
// active, or a WorkloadPolicy — may judge a request of operation op on
// gr: where none may (and no Go check or defaulter has work), the
// apiserver need not call shepherd at all (webhook/updatefilter).
func (e *Engine) Judges(gr schema.GroupResource, op string) bool {
	_, idx := e.fresh()
	for _, cr := range idx.of(gr) {
		if cr.matchesOperation(gr, op) {
			return true
		}
	}
	return false
}

// matchesOperation reports whether cr's matchConstraints send an op
// request on gr to it.
func (cr *compiledRule) matchesOperation(gr schema.GroupResource, op string) bool {
	mc := cr.policy.Spec.MatchConstraints
	if mc == nil || len(mc.ResourceRules) == 0 {
		return true
	}
	for _, rr := range mc.ResourceRules {
		resources := make([]string, 0, len(rr.Resources))
		for _, r := range rr.Resources {
			r, _, _ = strings.Cut(r, "/")
			resources = append(resources, r)
		}
		if !covers([]admissionregistrationv1.RuleWithOperations{{Operations: rr.Operations,
			Rule: admissionregistrationv1.Rule{APIGroups: rr.APIGroups, Resources: resources}}}, gr.Group, gr.Resource, admissionregistrationv1.OperationType(op)) {
			continue
		}
		return true
	}
	return false
}
