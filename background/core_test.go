package background

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/webhook"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// obj is a stored TrainJob whose spec.bad lists the rules it fails (by
// field), e.g. {"R1": ["spec.a", "spec.b"]}.
func obj(ns, name string, gen int64, bad map[string][]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion("trainer.kubeflow.org/v1alpha1")
	u.SetKind("TrainJob")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(types.UID("uid-" + ns + "/" + name))
	u.SetGeneration(gen)
	u.SetResourceVersion(strconv.FormatInt(gen, 10))
	spec := map[string]any{}
	for rule, fields := range bad {
		var fs []any
		for _, f := range fields {
			fs = append(fs, f)
		}
		spec[rule] = fs
	}
	u.Object["spec"] = spec
	return u
}

// fakeChain fails rule R on each field listed in spec[R] (R1 is a Deny
// rule, any other an Audit rule), and counts its calls.
type fakeChain struct{ calls int }

func (f *fakeChain) validate(_ context.Context, req *webhook.Request) *webhook.Verdict {
	f.calls++
	v := &webhook.Verdict{Allowed: true}
	if req.Operation != "CREATE" || !req.DryRun {
		panic(fmt.Sprintf("audited as %s dryRun=%t", req.Operation, req.DryRun))
	}
	var o map[string]any
	if err := json.Unmarshal(req.Object, &o); err != nil {
		panic(err)
	}
	spec, _ := o["spec"].(map[string]any)
	for _, rule := range []string{"R1", "R2"} {
		fields, _ := spec[rule].([]any)
		for _, fld := range fields {
			action := webhook.ActionAudit
			if rule == "R1" {
				action = webhook.ActionDeny
			}
			v.Violations = append(v.Violations, webhook.Violation{Rule: rule, Field: fld.(string), Message: rule + " failed", Action: action})
		}
	}
	return v
}

// stored is us as the audit's informers keep them.
func stored(t *testing.T, us ...*unstructured.Unstructured) []*Object {
	t.Helper()
	out := make([]*Object, 0, len(us))
	for _, u := range us {
		o, err := NewObject(u)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// counts is a pass's result reduced to rule -> violating objects.
func counts(r *Results) map[string]int {
	out := map[string]int{}
	for rule, rr := range r.Rules {
		out[rule] = rr.Objects
	}
	return out
}

func TestPassReusesVerdictsPerGenerationAndRuleSet(t *testing.T) {
	a := obj("ns", "a", 1, map[string][]string{"R1": {"spec.x"}})
	b := obj("ns", "b", 1, nil)
	statusWrite := a.DeepCopy()
	statusWrite.SetResourceVersion("1b") // same generation, labels, annotations
	relabelled := a.DeepCopy()
	relabelled.SetResourceVersion("1c")
	relabelled.SetLabels(map[string]string{"team": "x"})
	fixed := obj("ns", "a", 2, nil)
	for _, tc := range []struct {
		name      string
		steps     [][]*unstructured.Unstructured // each a pass's objects
		versions  []string
		evaluated []int
		last      map[string]int
	}{
		{"unchanged objects are judged once", [][]*unstructured.Unstructured{{a, b}, {a, b}}, []string{"1", "1"}, []int{2, 0}, map[string]int{"R1": 1}},
		{"a new rule set judges every object again", [][]*unstructured.Unstructured{{a, b}, {a, b}}, []string{"1", "2"}, []int{2, 2}, map[string]int{"R1": 1}},
		{"a status write is no change", [][]*unstructured.Unstructured{{a, b}, {statusWrite, b}}, []string{"1", "1"}, []int{2, 0}, map[string]int{"R1": 1}},
		{"new labels are a change", [][]*unstructured.Unstructured{{a, b}, {relabelled, b}}, []string{"1", "1"}, []int{2, 1}, map[string]int{"R1": 1}},
		{"a fixed object is cleared", [][]*unstructured.Unstructured{{a, b}, {fixed, b}}, []string{"1", "1"}, []int{2, 1}, map[string]int{}},
		{"a deleted object is cleared", [][]*unstructured.Unstructured{{a, b}, {b}}, []string{"1", "1"}, []int{2, 0}, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Core{}
			f := &fakeChain{}
			var last *Results
			for i, objs := range tc.steps {
				before := f.calls
				r, _, st, err := c.Pass(context.Background(), stored(t, objs...), tc.versions[i], f.validate, t0)
				if err != nil {
					t.Fatal(err)
				}
				if got := f.calls - before; got != tc.evaluated[i] || st.Evaluated != got {
					t.Errorf("pass %d: %d evaluations (stats %d), want %d", i, got, st.Evaluated, tc.evaluated[i])
				}
				last = r
			}
			if diff := cmp.Diff(tc.last, counts(last)); diff != "" {
				t.Errorf("last pass (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPassCountsObjectsAndKeepsTheFirstSamples(t *testing.T) {
	var objs []*unstructured.Unstructured
	// Seven objects fail R1, listed out of order; "m" fails it twice.
	for _, name := range []string{"g", "c", "a", "f", "e", "d"} {
		objs = append(objs, obj("ns2", name, 1, map[string][]string{"R1": {"spec.x"}}))
	}
	objs = append(objs, obj("ns1", "m", 1, map[string][]string{"R1": {"spec.z", "spec.y"}, "R2": {"spec.q"}}))
	objs = append(objs, obj("ns1", "ok", 1, nil))
	pcs := obj("ns1", "pcs", 1, map[string][]string{"R2": {"spec.q"}})
	pcs.SetKind("PodCliqueSet")
	pcs.SetAPIVersion("grove.io/v1alpha1")
	objs = append(objs, pcs)
	// Being deleted, or in an excluded namespace: not audited.
	gone := obj("ns1", "gone", 1, map[string][]string{"R1": {"spec.x"}})
	gone.SetDeletionTimestamp(&metav1.Time{Time: t0})
	objs = append(objs, gone, obj("kube-system", "sys", 1, map[string][]string{"R1": {"spec.x"}}))

	c := &Core{ExcludedNamespaces: map[string]bool{"kube-system": true}}
	r, fresh, st, err := c.Pass(context.Background(), stored(t, objs...), "1", (&fakeChain{}).validate, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 2 || r.Objects != 9 || r.Violating != 8 {
		t.Errorf("skipped %d, objects %d, violating %d; want 2, 9, 8", st.Skipped, r.Objects, r.Violating)
	}
	r1 := r.Rules["R1"]
	if r1.Objects != 7 || r1.Action != "Deny" || !cmp.Equal(r1.ByKind, map[string]int{"TrainJob": 7}) {
		t.Errorf("R1: %d objects, action %s, by kind %v", r1.Objects, r1.Action, r1.ByKind)
	}
	var got []string
	for _, s := range r1.Samples {
		got = append(got, s.Namespace+"/"+s.Name+" "+s.Field)
	}
	want := []string{"ns1/m spec.y", "ns1/m spec.z", "ns2/a spec.x", "ns2/c spec.x", "ns2/d spec.x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("R1 samples (-want +got):\n%s", diff)
	}
	if r2 := r.Rules["R2"]; r2.Objects != 2 || !cmp.Equal(r2.ByKind, map[string]int{"TrainJob": 1, "PodCliqueSet": 1}) {
		t.Errorf("R2: %d objects, by kind %v", r2.Objects, r2.ByKind)
	}
	// Per namespace, by kind then name: what an OpenReports writer reads.
	var ns1 []string
	for _, o := range r.Namespaces["ns1"] {
		ns1 = append(ns1, fmt.Sprintf("%s/%s:%d", o.Kind, o.Name, len(o.Findings)))
	}
	if diff := cmp.Diff([]string{"PodCliqueSet/pcs:1", "TrainJob/m:3"}, ns1); diff != "" {
		t.Errorf("namespace ns1 (-want +got):\n%s", diff)
	}
	if len(fresh) != 10 {
		t.Errorf("%d new findings on the first pass, want 10 (every violation)", len(fresh))
	}
}

// Only what an object's previous verdict lacked is new: a second pass
// under a new rule set that finds the same violations reports nothing, a
// newly broken field is reported alone.
func TestPassReportsOnlyNewFindings(t *testing.T) {
	c := &Core{}
	f := &fakeChain{}
	a := obj("ns", "a", 1, map[string][]string{"R1": {"spec.x"}})
	if _, fresh, _, _ := c.Pass(context.Background(), stored(t, a), "1", f.validate, t0); len(fresh) != 1 {
		t.Fatalf("first pass: %d new findings, want 1", len(fresh))
	}
	if _, fresh, _, _ := c.Pass(context.Background(), stored(t, a), "2", f.validate, t0); len(fresh) != 0 {
		t.Errorf("same violations under a new rule set: %v, want none new", fresh)
	}
	a2 := obj("ns", "a", 2, map[string][]string{"R1": {"spec.x"}, "R2": {"spec.y"}})
	_, fresh, _, _ := c.Pass(context.Background(), stored(t, a2), "2", f.validate, t0)
	if len(fresh) != 1 || fresh[0].Rule != "R2" || fresh[0].Name != "a" || fresh[0].Field != "spec.y" {
		t.Errorf("new generation: %+v, want only R2 spec.y", fresh)
	}
}

func TestPassStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := (&Core{}).Pass(ctx, stored(t, obj("ns", "a", 1, nil)), "1", (&fakeChain{}).validate, t0); err == nil {
		t.Error("a cancelled pass returned no error")
	}
}

// The audit judges a stored PodCliqueSet as the webhook judges a create
// of it, and no pass changes what the informer keeps: the chain decodes
// its own copy of the object.
func TestTheChainLeavesTheStoredObjectAlone(t *testing.T) {
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
		"metadata": map[string]any{"name": "p", "namespace": "ns", "uid": "u1", "generation": int64(1),
			"annotations": map[string]any{"shepherd.dev/workload-type": "Training"}},
		"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"cliques": []any{map[string]any{
			"name": "w", "spec": map[string]any{"roleName": "w", "replicas": int64(2), "minAvailable": int64(5),
				"podSpec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}},
		}}}},
	}}
	objs := stored(t, u)
	before := string(objs[0].Raw())
	c := &Core{}
	r, _, _, err := c.Pass(context.Background(), objs, "1", chain.Validate, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Violating != 1 {
		t.Errorf("the PodCliqueSet violates %d times, want once (minAvailable above replicas): %+v", r.Violating, r.Rules)
	}
	if after := string(objs[0].Raw()); after != before {
		t.Errorf("the pass changed the stored object:\n%s\nwas\n%s", after, before)
	}
}

// NewObject keeps the object as the webhook would decode it, without
// managedFields, and leaves the informer's decoded object as it is.
func TestNewObjectKeepsTheObjectWithoutManagedFields(t *testing.T) {
	u := obj("ns", "a", 3, map[string][]string{"R1": {"spec.x"}})
	u.SetLabels(map[string]string{"team": "ml"})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}})
	unstructured.SetNestedField(u.Object, int64(1)<<53+1, "spec", "big")
	unstructured.SetNestedField(u.Object, 2.5, "spec", "ratio")
	before := runtime.DeepCopyJSON(u.Object)
	o, err := NewObject(u)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, u.Object); diff != "" {
		t.Errorf("NewObject changed its input (-before +after):\n%s", diff)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := chain.Validate(context.Background(), &webhook.Request{Operation: "CREATE", Object: o.Raw(),
		Kind: metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}})
	want := runtime.DeepCopyJSON(u.Object)
	unstructured.RemoveNestedField(want, "metadata", "managedFields")
	if diff := cmp.Diff(want, v.Object); diff != "" {
		t.Errorf("the stored object as the chain decodes it (-want +got):\n%s", diff)
	}
	if o.GetGeneration() != 3 || o.GetResourceVersion() != "3" || o.GetUID() != "uid-ns/a" || o.GroupVersionKind().Kind != "TrainJob" {
		t.Errorf("identity: %+v %v", o.ObjectMeta, o.GroupVersionKind())
	}
	if o.meta != metaFingerprint(map[string]string{"team": "ml"}, nil) {
		t.Error("the fingerprint is not the labels'")
	}
}

// verdictOf is a chain that answers every object with vs (nil: no
// verdict at all).
func verdictOf(vs []webhook.Violation) ValidateFunc {
	return func(context.Context, *webhook.Request) *webhook.Verdict {
		if vs == nil {
			return nil
		}
		return &webhook.Verdict{Allowed: true, Violations: vs}
	}
}

func TestPassTurnsViolationsIntoFindings(t *testing.T) {
	t.Parallel()
	deny := func(field, msg string) webhook.Violation {
		return webhook.Violation{Rule: "R1", Action: webhook.ActionDeny, Field: field, Message: msg}
	}
	for _, tc := range []struct {
		name       string
		violations []webhook.Violation
		want       []Finding // nil: the object does not violate
	}{
		{"no verdict", nil, nil},
		{"no violations", []webhook.Violation{}, nil},
		{"in the chain's order", []webhook.Violation{deny("spec.y", "m"), deny("spec.x", "m")},
			[]Finding{{Rule: "R1", Action: "Deny", Field: "spec.y", Message: "m"}, {Rule: "R1", Action: "Deny", Field: "spec.x", Message: "m"}}},
		{"the same violation twice is one finding", []webhook.Violation{deny("spec.x", "m"), deny("spec.x", "m")},
			[]Finding{{Rule: "R1", Action: "Deny", Field: "spec.x", Message: "m"}}},
		// The finding names its rule in a field of its own: the message
		// does not say it again.
		{"the message without the rule's name", []webhook.Violation{deny("spec.x", "too many nodes (shepherd R1)")},
			[]Finding{{Rule: "R1", Action: "Deny", Field: "spec.x", Message: "too many nodes"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _, _, err := (&Core{}).Pass(context.Background(), stored(t, obj("ns", "a", 1, nil)), "1", verdictOf(tc.violations), t0)
			if err != nil {
				t.Fatal(err)
			}
			var got []Finding
			if objs := r.Namespaces["ns"]; len(objs) == 1 {
				got = objs[0].Findings
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if wantViolating := min(len(tc.want), 1); r.Violating != wantViolating || r.Objects != 1 {
				t.Errorf("objects %d, violating %d; want 1, %d", r.Objects, r.Violating, wantViolating)
			}
		})
	}
}

func TestPassBoundsSamples(t *testing.T) {
	t.Parallel()
	var objs []*unstructured.Unstructured
	for i := 0; i < 8; i++ {
		objs = append(objs, obj("ns", fmt.Sprintf("tj-%d", i), 1, map[string][]string{"R1": {"spec.x"}}))
	}
	long := strings.Repeat("x", 2*maxMessage)
	for _, tc := range []struct {
		name    string
		samples int
		want    int
	}{
		{"the default", 0, DefaultSamples},
		{"fewer", 2, 2},
		{"more than the violations", 20, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Core{Samples: tc.samples}
			r, _, _, err := c.Pass(context.Background(), stored(t, objs...), "1",
				verdictOf([]webhook.Violation{{Rule: "R1", Action: webhook.ActionDeny, Field: "spec.x", Message: long}}), t0)
			if err != nil {
				t.Fatal(err)
			}
			rr := r.Rules["R1"]
			if len(rr.Samples) != tc.want || rr.Objects != 8 {
				t.Fatalf("%d samples of %d objects, want %d of 8", len(rr.Samples), rr.Objects, tc.want)
			}
			// A sample's message is bounded (the CRD's limit), the
			// object's finding keeps all of it.
			if m := rr.Samples[0].Message; len(m) != maxMessage || !strings.HasSuffix(m, "...") {
				t.Errorf("a sample's message of %d bytes ending %q, want %d ending ...", len(m), m[len(m)-5:], maxMessage)
			}
			if m := r.Namespaces["ns"][0].Findings[0].Message; m != long {
				t.Errorf("the finding's message was cut to %d bytes", len(m))
			}
		})
	}
}

// An object without a UID (none the apiserver stores) cannot keep a
// verdict: it is skipped, not judged.
func TestPassSkipsObjectsWithoutAUID(t *testing.T) {
	t.Parallel()
	u := obj("ns", "a", 1, map[string][]string{"R1": {"spec.x"}})
	u.SetUID("")
	f := &fakeChain{}
	r, _, st, err := (&Core{}).Pass(context.Background(), stored(t, u), "1", f.validate, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 1 || f.calls != 0 || r.Objects != 0 {
		t.Errorf("skipped %d, judged %d, objects %d; want 1, 0, 0", st.Skipped, f.calls, r.Objects)
	}
}

// A pass cancelled midway keeps the verdicts it found before the cancel,
// and not the one it was judging then (a lookup may have failed for the
// cancel): the next pass under the same rule set judges only the rest.
func TestCancelledPassKeepsItsVerdicts(t *testing.T) {
	t.Parallel()
	var objs []*unstructured.Unstructured
	for i := 0; i < 100; i++ {
		objs = append(objs, obj("ns", fmt.Sprintf("tj-%03d", i), 1, map[string][]string{"R1": {"spec.x"}}))
	}
	all := stored(t, objs...)
	c := &Core{}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeChain{}
	const judged = 10 // the 10th judgement is cancelled while it runs
	cancelling := func(ctx context.Context, req *webhook.Request) *webhook.Verdict {
		if f.calls == judged-1 {
			cancel()
		}
		return f.validate(ctx, req)
	}
	_, _, first, err := c.Pass(ctx, all, "1", cancelling, t0)
	if err == nil || first.Evaluated != judged || f.calls != judged {
		t.Fatalf("cancelled pass: %v, %d judged (%d calls); want an error after judging %d", err, first.Evaluated, f.calls, judged)
	}
	r, _, second, err := c.Pass(context.Background(), all, "1", f.validate, t0)
	if err != nil {
		t.Fatal(err)
	}
	if second.Reused != judged-1 || second.Evaluated != len(all)-(judged-1) || r.Violating != len(all) {
		t.Errorf("next pass: reused %d, judged %d, violating %d; want %d, %d, %d", second.Reused, second.Evaluated, r.Violating, judged-1, len(all)-(judged-1), len(all))
	}
}
