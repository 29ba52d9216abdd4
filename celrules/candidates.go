package celrules

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// candidates is an evaluation snapshot indexed by the resource a request
// is for: the rules whose matchConstraints can match it, in evaluation
// order. Without it every request ran the apiserver's matcher for every
// rule of every kind (its namespace and object selectors first, then the
// resource rules), which cost a TrainJob's validation as much as its own
// rules' CEL did (make bench-admission's profile of serve). The index only
// narrows the rules the matcher is asked about: every candidate still goes
// through the matcher, so what matches is decided exactly as before.
type candidates struct {
	byResource map[schema.GroupResource][]*compiledRule
	// ordered is the whole snapshot, filtered on the fly for a resource no
	// rule names (the webhooks are sent none; `check` and the audit may
	// be); resources holds what each of its rules names, in the same order.
	ordered   []*compiledRule
	resources [][]schema.GroupResource
}

// anyName is the wildcard of a ValidatingAdmissionPolicy's apiGroups and
// resources.
const anyName = "*"

// newCandidates indexes ordered (evaluation order is kept in every list).
// It runs on every change of the rules (the first evaluation after it), so
// it is one pass over the rules, each added to the lists of the resources
// it covers: filtering every rule once per named resource cost
// milliseconds per change with thousands of WorkloadPolicies.
func newCandidates(ordered []*compiledRule) *candidates {
	c := &candidates{byResource: map[schema.GroupResource][]*compiledRule{}, ordered: ordered, resources: make([][]schema.GroupResource, 0, len(ordered))}
	named := map[schema.GroupResource]bool{}
	for _, cr := range ordered {
		c.resources = append(c.resources, cr.groupResources)
		for _, gr := range cr.groupResources {
			if gr.Group != anyName && gr.Resource != anyName {
				named[gr] = true
			}
		}
	}
	for i, cr := range ordered {
		var covers []schema.GroupResource
		for _, own := range c.resources[i] {
			if own.Group != anyName && own.Resource != anyName {
				covers = append(covers, own)
				continue
			}
			for gr := range named {
				if (own.Group == anyName || own.Group == gr.Group) && (own.Resource == anyName || own.Resource == gr.Resource) {
					covers = append(covers, gr)
				}
			}
		}
		for j, gr := range covers {
			if !slices.Contains(covers[:j], gr) {
				c.byResource[gr] = append(c.byResource[gr], cr)
			}
		}
	}
	return c
}

// of returns the rules that may match a request for gr.
func (c *candidates) of(gr schema.GroupResource) []*compiledRule {
	if l, ok := c.byResource[gr]; ok {
		return l
	}
	return c.filter(gr)
}

// filter returns the rules one of whose resources covers gr (a request's
// group and resource, never wildcards), in evaluation order.
func (c *candidates) filter(gr schema.GroupResource) []*compiledRule {
	var out []*compiledRule
	for i, cr := range c.ordered {
		for _, own := range c.resources[i] {
			if (own.Group == anyName || own.Group == gr.Group) && (own.Resource == anyName || own.Resource == gr.Resource) {
				out = append(out, cr)
				break
			}
		}
	}
	return out
}

// resources lists the (group, resource) pairs cr's matchConstraints name
// (compileRule keeps them in groupResources),
// subresources cut off ("trainjobs/status" names trainjobs) and wildcards
// kept; a rule with no resourceRules matches every resource.
func (cr *compiledRule) resources() []schema.GroupResource {
	mc := cr.policy.Spec.MatchConstraints
	if mc == nil || len(mc.ResourceRules) == 0 {
		return []schema.GroupResource{{Group: anyName, Resource: anyName}}
	}
	var out []schema.GroupResource
	for _, rr := range mc.ResourceRules {
		for _, g := range rr.APIGroups {
			for _, r := range rr.Resources {
				r, _, _ = strings.Cut(r, "/")
				out = append(out, schema.GroupResource{Group: g, Resource: r})
			}
		}
	}
	return out
}
