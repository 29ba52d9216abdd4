package background

import (
	"cmp"
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// DefaultSamples is how many violations a rule's result (and a
// WorkloadPolicy's status) lists: enough to find the offenders, never
// thousands in one object.
const DefaultSamples = 5

// maxMessage bounds a sample's message (the CRD's documented limit).
const maxMessage = 1024

// ValidateFunc judges one request: the admission chain's Validate.
type ValidateFunc func(ctx context.Context, req *webhook.Request) *webhook.Verdict

// Finding is one failed validation of a stored object.
type Finding struct {
	Rule    string `json:"rule"`
	Action  string `json:"action"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// ObjectRef names a stored object.
type ObjectRef struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
}

// ObjectResult is a stored object that fails at least one rule, with every
// failed validation in rule order.
type ObjectResult struct {
	ObjectRef
	Findings []Finding `json:"findings"`
}

// Sample is one violation as a rule's result lists it.
type Sample struct {
	ObjectRef
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// RuleResult is what one rule finds over every stored object.
type RuleResult struct {
	// Action is the rule's action (of its first finding).
	Action string `json:"action"`
	// Objects counts the violating objects (an object failing the rule on
	// three fields counts once).
	Objects int `json:"objects"`
	// ByKind counts the violating objects per kind.
	ByKind map[string]int `json:"byKind"`
	// Samples are the first violations in the order of namespace, name,
	// kind, field and message: the same every pass over the same objects.
	Samples []Sample `json:"samples"`
}

// Results is one pass's aggregate.
type Results struct {
	// RuleSetVersion is the version the verdicts were found under.
	RuleSetVersion string    `json:"ruleSetVersion"`
	Time           time.Time `json:"time"`
	// Objects counts the objects audited; Violating those failing at least
	// one rule.
	Objects   int `json:"objects"`
	Violating int `json:"violating"`
	// Rules holds a result for every rule with at least one violation.
	Rules map[string]*RuleResult `json:"rules"`
	// Namespaces lists the violating objects per namespace ("" for
	// cluster-scoped ones), by kind then name: one report per namespace,
	// one result per object and rule, is what an OpenReports writer makes
	// of it.
	Namespaces map[string][]ObjectResult `json:"namespaces"`
}

// Stats says how a pass got its verdicts.
type Stats struct {
	// Evaluated objects were judged by the chain; Reused kept the verdict
	// of an earlier pass; Skipped are being deleted or in an excluded
	// namespace; Dropped verdicts were of objects gone since.
	Evaluated, Reused, Skipped, Dropped int
}

// NewFinding is a violation a pass found that the object's previous
// verdict did not have: what becomes an audit record.
type NewFinding struct {
	ObjectRef
	Finding
}

// stamp is what a verdict was found from.
type stamp struct {
	resourceVersion string
	generation      int64
	meta            uint64 // labels and annotations (metaFingerprint)
	rules           string
}

type entry struct {
	stamp    stamp
	ref      ObjectRef
	findings []Finding
}

// Core keeps the verdict of every stored object between passes. It is not
// safe for concurrent use: one worker runs the passes.
type Core struct {
	// Samples is the number of samples per rule (DefaultSamples if 0).
	Samples int
	// ExcludedNamespaces are never audited: the webhooks do not apply
	// there either.
	ExcludedNamespaces map[string]bool

	entries map[types.UID]*entry
}

// Pass judges objs — every stored object of the audited kinds now — under
// the rule set version: an object whose verdict was found under the same
// version, from the same resourceVersion or the same generation, labels
// and annotations, keeps it; any other is judged by validate as a dry-run
// CREATE of it as stored. Verdicts of objects no longer in objs are
// dropped. It returns the aggregate, the violations new since the object's
// last verdict, and how the verdicts were got. A cancelled ctx stops the
// pass early with ctx's error; the verdicts found so far are kept.
//
// objs are read, never changed: they are the informers' cached objects.
func (c *Core) Pass(ctx context.Context, objs []*Object, version string, validate ValidateFunc, now time.Time) (*Results, []NewFinding, Stats, error) {
	if c.entries == nil {
		c.entries = map[types.UID]*entry{}
	}
	var st Stats
	var fresh []NewFinding
	seen := make(map[types.UID]bool, len(objs))
	for i, o := range objs {
		if i%64 == 0 && ctx.Err() != nil {
			return nil, nil, st, ctx.Err()
		}
		uid := o.GetUID()
		if o.GetDeletionTimestamp() != nil || c.ExcludedNamespaces[o.GetNamespace()] || uid == "" {
			st.Skipped++
			continue
		}
		seen[uid] = true
		old := c.entries[uid]
		s := stamp{resourceVersion: o.GetResourceVersion(), rules: version}
		if old != nil && old.stamp.rules == version && old.stamp.resourceVersion == s.resourceVersion {
			st.Reused++
			continue
		}
		s.generation, s.meta = o.GetGeneration(), o.meta
		if old != nil && old.stamp.rules == version && old.stamp.generation == s.generation && old.stamp.meta == s.meta {
			old.stamp = s // a status write: the same verdict
			st.Reused++
			continue
		}
		st.Evaluated++
		findings := judge(ctx, o, validate)
		if ctx.Err() != nil {
			// Judged as the pass was cancelled: a lookup may have failed
			// for that, so the verdict is not kept for the next pass to
			// reuse.
			return nil, nil, st, ctx.Err()
		}
		e := &entry{stamp: s, ref: refOf(o), findings: findings}
		c.entries[uid] = e
		var before []Finding
		if old != nil {
			before = old.findings
		}
		for _, f := range e.findings {
			if !slices.Contains(before, f) {
				fresh = append(fresh, NewFinding{ObjectRef: e.ref, Finding: f})
			}
		}
	}
	for uid := range c.entries {
		if !seen[uid] {
			delete(c.entries, uid)
			st.Dropped++
		}
	}
	return c.aggregate(version, now), fresh, st, nil
}

// judge runs validate on o as a dry-run CREATE of it and returns every
// violation, deduplicated (a rule reporting the same field twice counts
// once). The chain decodes o's JSON as it decodes a webhook request's: the
// decoded object is garbage once judged, and o stays as it is whatever
// validate does with it.
func judge(ctx context.Context, o *Object, validate ValidateFunc) []Finding {
	gvk := o.GroupVersionKind()
	req := &webhook.Request{
		UID:       types.UID("audit-" + string(o.GetUID())),
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version},
		Namespace: o.GetNamespace(),
		Name:      o.GetName(),
		Object:    o.raw,
		DryRun:    true,
	}
	v := validate(ctx, req)
	if v == nil || len(v.Violations) == 0 {
		return nil
	}
	out := make([]Finding, 0, len(v.Violations))
	for _, vi := range v.Violations {
		// The finding names its rule in a field of its own.
		f := Finding{Rule: vi.Rule, Action: string(vi.Action), Field: vi.Field, Message: celrules.Unnamed(vi.Rule, vi.Message)}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

func refOf(o *Object) ObjectRef {
	return ObjectRef{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID}
}

// metaFingerprint hashes an object's labels and annotations: a change to
// either leaves a custom resource's generation as it is, yet labels decide
// what an objectSelector matches and annotations carry seed knobs.
func metaFingerprint(labels, annotations map[string]string) uint64 {
	h := fnv.New64a()
	for _, m := range []map[string]string{labels, annotations} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			h.Write([]byte(k))
			h.Write([]byte{0})
			h.Write([]byte(m[k]))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return h.Sum64()
}

// compareSamples orders samples by namespace, name, kind, field, message.
func compareSamples(a, b Sample) int {
	return cmp.Or(
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Field, b.Field),
		cmp.Compare(a.Message, b.Message),
	)
}

// aggregate sums the verdicts up.
func (c *Core) aggregate(version string, now time.Time) *Results {
	n := c.Samples
	if n <= 0 {
		n = DefaultSamples
	}
	r := &Results{RuleSetVersion: version, Time: now, Objects: len(c.entries), Rules: map[string]*RuleResult{}, Namespaces: map[string][]ObjectResult{}}
	for _, e := range c.entries {
		if len(e.findings) == 0 {
			continue
		}
		r.Violating++
		r.Namespaces[e.ref.Namespace] = append(r.Namespaces[e.ref.Namespace], ObjectResult{ObjectRef: e.ref, Findings: e.findings})
		counted := map[string]bool{}
		for _, f := range e.findings {
			rr := r.Rules[f.Rule]
			if rr == nil {
				rr = &RuleResult{Action: f.Action, ByKind: map[string]int{}}
				r.Rules[f.Rule] = rr
			}
			if !counted[f.Rule] {
				counted[f.Rule] = true
				rr.Objects++
				rr.ByKind[e.ref.Kind]++
			}
			rr.Samples = keepFirst(rr.Samples, Sample{ObjectRef: e.ref, Field: f.Field, Message: events.Truncate(f.Message, maxMessage)}, n)
		}
	}
	for ns, objs := range r.Namespaces {
		slices.SortFunc(objs, func(a, b ObjectResult) int {
			return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
		})
		r.Namespaces[ns] = objs
	}
	return r
}

// keepFirst inserts s into the sorted samples, keeping the first n: a pass
// over many thousand violations never sorts them all.
func keepFirst(samples []Sample, s Sample, n int) []Sample {
	i, _ := slices.BinarySearchFunc(samples, s, compareSamples)
	if i >= n {
		return samples
	}
	samples = slices.Insert(samples, i, s)
	if len(samples) > n {
		samples = samples[:n]
	}
	return samples
}
