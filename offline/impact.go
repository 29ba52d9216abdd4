package offline

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// ImpactViolation is one failed validation of a stored object in
// `shepherd audit --policy -o json`.
type ImpactViolation struct {
	Rule    string `json:"rule"`
	Action  string `json:"action"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Exception is the PolicyException of --policy that exempts the
	// violation (action Exempt): it would neither deny nor warn.
	Exception string `json:"exception,omitempty"`
}

// ImpactObject is one stored object that fails at least one reported rule.
type ImpactObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Namespace  string            `json:"namespace,omitempty"`
	Name       string            `json:"name"`
	Violations []ImpactViolation `json:"violations"`
}

// ImpactPolicy sums up one reported rule.
type ImpactPolicy struct {
	Rule string `json:"rule"`
	// Action is what the rule does now; WouldDeny counts the objects a
	// create of which it would reject with that action.
	Action           string `json:"action"`
	ViolatingObjects int    `json:"violatingObjects"`
}

// ImpactReport is the JSON of `shepherd audit --policy -o json`.
type ImpactReport struct {
	// Source says where the objects came from: the cluster (its server
	// URL) or the files given.
	Source string `json:"source"`
	// Evaluated counts the objects judged: those of the kinds the
	// reported rules name.
	Evaluated int `json:"evaluated"`
	// WouldDeny counts the objects at least one Deny rule fails on.
	WouldDeny int            `json:"wouldDeny"`
	Rules     []ImpactPolicy `json:"rules"`
	Objects   []ImpactObject `json:"objects"`
}

// impactUID marks the requests audit --policy makes, in the rules' view.
const impactUID = "shepherd-audit-policy"

// ImpactInput is what Impact judges: the stored objects (they are also
// what the lookups see), the policies and exceptions not applied yet, and
// the configuration of the built-in rules.
type ImpactInput struct {
	Config     celrules.Config
	Objects    []*unstructured.Unstructured
	Policies   []*shepherdv1alpha1.WorkloadPolicy
	Exceptions []*shepherdv1alpha1.PolicyException
	// WorkloadAPI says the cluster serves the Workload API.
	WorkloadAPI bool
	// Namespace, when set, narrows the objects judged to it.
	Namespace string
	// IncludeBuiltin also reports what the built-in rules find, not only
	// the given policies.
	IncludeBuiltin bool
	// Source says where the objects came from, for the report.
	Source string
	// Timeout bounds the judgement of one object.
	Timeout time.Duration
}

// Impact judges every object of the kinds the policies name (every kind
// shepherd admits, with IncludeBuiltin) as the webhook would judge a
// create of it, dry run, and reports what each policy would deny, warn,
// audit or exempt: `shepherd audit --policy`. A policy that does not
// compile, an exception naming an unknown rule, and an object that cannot
// be judged in time are errors.
func Impact(ctx context.Context, in ImpactInput) (*ImpactReport, error) {
	lookupObjs := make([]runtime.Object, 0, len(in.Objects))
	for _, u := range in.Objects {
		lookupObjs = append(lookupObjs, u)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{
		// Every object read stands for the stored ones the lookups see
		// (runtimes, namespaces, the TrainJob a PodCliqueSet names): one
		// read of the cluster, not one request per object judged.
		Lookups: webhook.NewObjectLookups(lookupObjs, in.WorkloadAPI),
		Rules:   in.Config,
	})
	if err != nil {
		return nil, err
	}
	reported := map[string]bool{}
	kinds := map[schema.GroupKind]bool{}
	for _, p := range in.Policies {
		if errs := chain.SetPolicy(p); len(errs) > 0 {
			return nil, fmt.Errorf("WorkloadPolicy %q does not compile against %s:\n%s", p.Name, in.Config.Schemas.Source, Indent(errs.ToAggregate().Error()))
		}
		reported[p.Name] = true
		for gk := range policyKinds(in.Config.Schemas, p) {
			kinds[gk] = true
		}
	}
	set, err := ExceptionSet(in.Exceptions, in.Policies)
	if err != nil {
		return nil, err
	}
	chain.SetExceptions(set)
	if in.IncludeBuiltin {
		for _, sk := range celrules.WebhookKinds {
			kinds[sk.GroupKind] = true
		}
	}

	rep := &ImpactReport{Source: in.Source, Rules: []ImpactPolicy{}, Objects: []ImpactObject{}}
	counts := map[string]*ImpactPolicy{}
	for _, p := range in.Policies {
		counts[p.Name] = &ImpactPolicy{Rule: p.Name, Action: string(actionOf(p))}
	}
	for _, u := range in.Objects {
		gvk := u.GroupVersionKind()
		if !kinds[gvk.GroupKind()] || (in.Namespace != "" && u.GetNamespace() != in.Namespace) {
			continue
		}
		rep.Evaluated++
		req, err := Request("CREATE", u, nil)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", gvk.Kind, NamespacedName(u), err)
		}
		req.UID = impactUID
		req.UserInfo.Username = impactUID
		// A dry run: rules that look at dryRun see that nothing is stored.
		req.DryRun = true
		v, err := RunWithin(ctx, in.Timeout, chain.Validate, req)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", gvk.Kind, NamespacedName(u), err)
		}
		obj := ImpactObject{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
		denied := false
		seen := map[string]bool{}
		for _, viol := range v.Violations {
			if !reported[viol.Rule] && !in.IncludeBuiltin {
				continue
			}
			obj.Violations = append(obj.Violations, ImpactViolation{Rule: viol.Rule, Action: string(viol.Action), Field: viol.Field, Message: viol.Message})
			denied = denied || viol.Action == webhook.ActionDeny
			if seen[viol.Rule] {
				continue
			}
			seen[viol.Rule] = true
			c := counts[viol.Rule]
			if c == nil {
				c = &ImpactPolicy{Rule: viol.Rule, Action: string(viol.Action)}
				counts[viol.Rule] = c
			}
			c.ViolatingObjects++
		}
		for _, e := range v.Exempted {
			if reported[e.Rule] || in.IncludeBuiltin {
				obj.Violations = append(obj.Violations, ImpactViolation{Rule: e.Rule, Action: string(webhook.ActionExempt), Field: e.Field, Message: e.Message, Exception: e.Exception})
			}
		}
		if len(obj.Violations) == 0 {
			continue
		}
		if denied {
			rep.WouldDeny++
		}
		rep.Objects = append(rep.Objects, obj)
	}
	for _, c := range counts {
		rep.Rules = append(rep.Rules, *c)
	}
	sort.Slice(rep.Rules, func(i, j int) bool { return rep.Rules[i].Rule < rep.Rules[j].Rule })

	return rep, nil
}

func actionOf(p *shepherdv1alpha1.WorkloadPolicy) shepherdv1alpha1.Action {
	if p.Spec.Action == "" {
		return shepherdv1alpha1.ActionDeny
	}
	return p.Spec.Action
}

// policyKinds are the webhook kinds p's match names (by kind or resource).
// Scope rules refuse wildcards and kinds outside WebhookKinds at compile
// time, so this is exactly what the policy can apply to.
func policyKinds(s *celrules.Schemas, p *shepherdv1alpha1.WorkloadPolicy) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, rr := range p.Spec.Match.Resources {
		for _, sk := range celrules.WebhookKinds {
			if !slices.Contains(rr.APIGroups, sk.Group) {
				continue
			}
			if slices.Contains(rr.Kinds, sk.Kind) || slices.Contains(rr.Resources, sk.Resource) {
				out[sk.GroupKind] = true
			}
			if kind, ok := s.KindForResource(schema.GroupResource{Group: sk.Group, Resource: sk.Resource}); ok && slices.Contains(rr.Kinds, kind) {
				out[sk.GroupKind] = true
			}
		}
	}
	return out
}
