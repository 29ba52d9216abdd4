package celrules

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
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
	// byNamespace narrows each list of byResource by the request's
	// namespace (nil for a list no rule of which can be narrowed).
	byNamespace map[schema.GroupResource]*namespaceIndex
	// ordered is the whole snapshot, filtered on the fly for a resource no
	// rule names (the webhooks are sent none; `check` and the audit may
	// be).
	ordered []*compiledRule
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
	c := &candidates{byResource: map[schema.GroupResource][]*compiledRule{}, ordered: ordered}
	named := map[schema.GroupResource]bool{}
	var last schema.GroupResource // runs of policies name the same resource
	for _, cr := range ordered {
		for _, gr := range cr.groupResources {
			if gr != last && gr.Group != anyName && gr.Resource != anyName {
				named[gr], last = true, gr
			}
		}
	}
	// The list being appended to, written back when the resource changes
	// (a map assignment per rule was most of the cost).
	var curGR schema.GroupResource
	var cur []*compiledRule
	open := false
	flush := func() {
		if open {
			c.byResource[curGR] = cur
			open = false
		}
	}
	for _, cr := range ordered {
		if own := cr.groupResources; len(own) == 1 && own[0].Group != anyName && own[0].Resource != anyName {
			// Most rules name one resource: no list of what they cover.
			if !open || own[0] != curGR {
				flush()
				curGR, cur, open = own[0], c.byResource[own[0]], true
			}
			cur = append(cur, cr)
			continue
		}
		flush()
		var covers []schema.GroupResource
		for _, own := range cr.groupResources {
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
	flush()
	c.byNamespace = map[schema.GroupResource]*namespaceIndex{}
	for gr, list := range c.byResource {
		if idx := newNamespaceIndex(list); idx != nil {
			c.byNamespace[gr] = idx
		}
	}
	return c
}

// namespaceIndex narrows a list of rules by the labels of the request's
// namespace: a rule whose namespaceSelector requires a label to have one
// value ("team=a", as per-team policies do) can only match in a namespace
// with that label and value. With thousands of per-team WorkloadPolicies,
// running even the parsed selector of every one on every request was
// most of an admission's CPU (issue 32). Like the resource index it only
// narrows: every rule it keeps still goes through the selector and the
// matcher.
type namespaceIndex struct {
	// open are the positions of the rules that may match in any
	// namespace; byLabel those that need "key=value", by it.
	open    []int
	byLabel map[string][]int
}

// requiredLabel is a "key=value" that every namespace the selector
// matches has; false when the selector requires none.
func requiredLabel(sel labels.Selector) (string, bool) {
	if sel == nil {
		return "", false
	}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return "", false
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := r.Values(); vals.Len() == 1 {
				return r.Key() + "=" + vals.UnsortedList()[0], true
			}
		}
	}
	return "", false
}

// newNamespaceIndex indexes list, nil when no rule of it requires a label.
func newNamespaceIndex(list []*compiledRule) *namespaceIndex {
	idx := &namespaceIndex{byLabel: make(map[string][]int, len(list))}
	// Per-team policies each require a label of their own: one position
	// per key, cut from one array (an allocation per key was most of a
	// rebuild).
	positions := make([]int, len(list))
	for i, cr := range list {
		if kv := cr.nsRequires; kv != "" {
			if prev, ok := idx.byLabel[kv]; ok {
				idx.byLabel[kv] = append(prev, i)
				continue
			}
			positions[i] = i
			idx.byLabel[kv] = positions[i : i+1 : i+1]
		} else {
			idx.open = append(idx.open, i)
		}
	}
	if len(idx.byLabel) == 0 {
		return nil
	}
	return idx
}

// narrow returns the rules of list (which idx indexes) that may match in
// a namespace with nsLabels, in evaluation order.
func (idx *namespaceIndex) narrow(list []*compiledRule, nsLabels map[string]string) []*compiledRule {
	pos := slices.Clone(idx.open)
	for k, v := range nsLabels {
		pos = append(pos, idx.byLabel[k+"="+v]...)
	}
	slices.Sort(pos)
	out := make([]*compiledRule, len(pos))
	for i, p := range pos {
		out[i] = list[p]
	}
	return out
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
	for _, cr := range c.ordered {
		if cr.covers(gr) {
			out = append(out, cr)
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
