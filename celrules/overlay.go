package celrules

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// maxOverlay is how many policies may change before an evaluation
// rebuilds the snapshot rather than apply the changes over it.
const maxOverlay = 64

// overlay is the WorkloadPolicies set or deleted since the evaluation
// snapshot (Engine.ordered and its index) was built, applied over it by
// each evaluation until there are maxOverlay of them. Rebuilding the
// snapshot and its index costs every rule (about 5 ms with 10,000
// policies), and while policies were being applied each admission rebuilt
// it: a third of a replica's CPU while 10,000 WorkloadPolicies were
// created (test/faults). Like the snapshot it is replaced, never mutated.
type overlay struct {
	// byName is every policy changed, with its compiled rule now (nil
	// when deleted or no longer compiling).
	byName map[string]*compiledRule
	// added are byName's rules, sorted by name (the evaluation order).
	added []*compiledRule
}

// with returns o plus name's change to cr (nil: gone).
func (o *overlay) with(name string, cr *compiledRule) *overlay {
	n := &overlay{byName: map[string]*compiledRule{}}
	if o != nil {
		n.byName = maps.Clone(o.byName)
	}
	n.byName[name] = cr
	for _, c := range n.byName {
		if c != nil {
			n.added = append(n.added, c)
		}
	}
	slices.SortFunc(n.added, func(a, b *compiledRule) int { return strings.Compare(a.rule.ID, b.rule.ID) })
	return n
}

// apply returns rules (candidates of the snapshot for gr, in evaluation
// order) with the changed policies replaced by their current versions
// that cover gr, in evaluation order: built-ins first, then policies by
// name. Like the index, it only narrows: the matcher still decides.
func (o *overlay) apply(rules []*compiledRule, gr schema.GroupResource) []*compiledRule {
	var add []*compiledRule
	for _, cr := range o.added {
		if cr.covers(gr) {
			add = append(add, cr)
		}
	}
	out := make([]*compiledRule, 0, len(rules)+len(add))
	for _, cr := range rules {
		if cr.source == SourcePolicy {
			if _, changed := o.byName[cr.rule.ID]; changed {
				continue
			}
			for len(add) > 0 && add[0].rule.ID < cr.rule.ID {
				out, add = append(out, add[0]), add[1:]
			}
		}
		out = append(out, cr)
	}
	return append(out, add...)
}

// covers reports whether one of cr's resources covers gr (a request's
// group and resource, never wildcards).
func (cr *compiledRule) covers(gr schema.GroupResource) bool {
	for _, own := range cr.groupResources {
		if (own.Group == anyName || own.Group == gr.Group) && (own.Resource == anyName || own.Resource == gr.Resource) {
			return true
		}
	}
	return false
}
