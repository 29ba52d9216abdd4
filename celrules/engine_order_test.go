package celrules

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// snapshotIDs lists the rules of e's evaluation snapshot, in order.
func snapshotIDs(e *Engine) []string {
	var out []string
	for _, cr := range e.snapshot() {
		out = append(out, cr.rule.ID)
	}
	return out
}

// withVersion is p with resourceVersion rv.
func withVersion(p *shepherdv1alpha1.WorkloadPolicy, rv string) *shepherdv1alpha1.WorkloadPolicy {
	p.ResourceVersion = rv
	return p
}

// Policies are evaluated by name whatever order they were given in, and a
// policy set again keeps its place: the verdicts' order is the same on every
// replica, whichever order its informer delivered the policies in.
func TestPoliciesAreEvaluatedInNameOrder(t *testing.T) {
	e := policyEngine(t)
	for _, name := range []string{"charlie", "alpha", "delta", "bravo"} {
		if errs := e.SetPolicy(policy(name, nil, "false")); len(errs) > 0 {
			t.Fatalf("%s: %v", name, errs)
		}
	}
	want := []string{"alpha/Deny", "bravo/Deny", "charlie/Deny", "delta/Deny"}
	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	if diff := cmp.Diff(want, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
	// Replaced (a new version): same place.
	if errs := e.SetPolicy(policy("bravo", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Action = shepherdv1alpha1.ActionWarn }, "false")); len(errs) > 0 {
		t.Fatal(errs)
	}
	e.DeletePolicy("charlie")
	if errs := e.SetPolicy(policy("beta", nil, "false")); len(errs) > 0 {
		t.Fatal(errs)
	}
	want = []string{"alpha/Deny", "beta/Deny", "bravo/Warn", "delta/Deny"}
	if diff := cmp.Diff(want, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("verdicts after a replace, a delete and an insert (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"alpha", "beta", "bravo", "delta"}, e.names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

// The snapshot holds the enabled built-ins first, in library order, then the
// policies by name; Export and Rules list them in that order, and a
// disabled built-in is listed by Rules but neither evaluated nor exported.
func TestSnapshotIsBuiltinsInLibraryOrderThenPolicies(t *testing.T) {
	lib, err := BuiltinRules()
	if err != nil {
		t.Fatal(err)
	}
	disabled := lib[1].ID
	e, err := NewEngine(Config{Schemas: seedSchemas(t), DisabledRules: []string{disabled}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"zz-last", "aa-first"} {
		if errs := e.SetPolicy(policy(name, nil, "true")); len(errs) > 0 {
			t.Fatalf("%s: %v", name, errs)
		}
	}
	var want []string
	for _, r := range lib {
		if r.ID != disabled {
			want = append(want, r.ID)
		}
	}
	want = append(want, "aa-first", "zz-last")
	if diff := cmp.Diff(want, snapshotIDs(e)); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}

	vaps, bindings := e.Export()
	var exported []string
	for i, v := range vaps {
		exported = append(exported, v.Name)
		if bindings[i].Name != v.Name {
			t.Errorf("binding %d is %s, its policy %s", i, bindings[i].Name, v.Name)
		}
	}
	var wantExported []string
	for _, id := range want {
		src := SourceBuiltin
		if id == "aa-first" || id == "zz-last" {
			src = SourcePolicy
		}
		wantExported = append(wantExported, PolicyName(id, src))
	}
	if diff := cmp.Diff(wantExported, exported); diff != "" {
		t.Errorf("exported (-want +got):\n%s", diff)
	}

	var listed []string
	enabled := map[string]bool{}
	for _, r := range e.Rules() {
		listed = append(listed, r.ID)
		enabled[r.ID] = r.Enabled
	}
	var wantListed []string
	for _, r := range lib {
		wantListed = append(wantListed, r.ID)
	}
	wantListed = append(wantListed, "aa-first", "zz-last")
	if diff := cmp.Diff(wantListed, listed); diff != "" {
		t.Errorf("Rules (-want +got):\n%s", diff)
	}
	if enabled[disabled] || !enabled["aa-first"] || !enabled[lib[0].ID] {
		t.Errorf("Enabled per rule %v: want %s off, the others on", enabled, disabled)
	}
}

// A new version of a policy that does not compile is not applied at all:
// its previous version stops being enforced and listed, and comes back
// only with a version that compiles.
func TestAPolicyThatNoLongerCompilesIsRemoved(t *testing.T) {
	e := policyEngine(t)
	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	if errs := e.SetPolicy(withVersion(policy("p", nil, "false"), "1")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if diff := cmp.Diff([]string{"p/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Fatalf("version 1 (-want +got):\n%s", diff)
	}
	errs := e.SetPolicy(withVersion(policy("p", nil, "object.spec.nope("), "2"))
	if len(errs) != 1 || errs[0].Field != "spec.validations[0].expression" {
		t.Fatalf("version 2 errors %v, want one on the validation's expression", errs)
	}
	if res := e.Evaluate(context.Background(), in); len(res) != 0 {
		t.Errorf("a version that does not compile left %v enforced", rules(res))
	}
	for _, r := range e.Rules() {
		if r.ID == "p" {
			t.Errorf("a policy that does not compile is listed: %+v", r)
		}
	}
	if len(e.names) != 0 {
		t.Errorf("names %v, want none", e.names)
	}
	if errs := e.SetPolicy(withVersion(policy("p", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Action = shepherdv1alpha1.ActionAudit }, "false"), "3")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if diff := cmp.Diff([]string{"p/Audit"}, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("version 3 (-want +got):\n%s", diff)
	}
	if _, failed := e.failed["p"]; failed {
		t.Error("the failure of version 2 is still recorded after version 3 compiled")
	}
}

// A resync of a version that did not compile answers the errors recorded
// for it (the same errors, not a compile of their own); a policy without a
// resourceVersion (offline, `shepherd check`) is compiled every time.
func TestFailedVersionIsNotCompiledAgain(t *testing.T) {
	e := policyEngine(t)
	bad := withVersion(policy("p", nil, "object.spec.nope("), "7")
	first := e.SetPolicy(bad)
	if len(first) != 1 {
		t.Fatalf("errors %v, want one", first)
	}
	again := e.SetPolicy(bad.DeepCopy())
	if len(again) != 1 || again[0] != first[0] {
		t.Errorf("the resync answered %v (%p), want the recorded error %p", again, again[0], first[0])
	}
	unversioned := withVersion(policy("q", nil, "true"), "")
	if errs := e.SetPolicy(unversioned); len(errs) > 0 {
		t.Fatal(errs)
	}
	before := e.policies["q"]
	if errs := e.SetPolicy(unversioned.DeepCopy()); len(errs) > 0 {
		t.Fatal(errs)
	}
	if e.policies["q"] == before {
		t.Error("a policy without a resourceVersion was taken from the cache")
	}
}

// Deleting a policy removes it from evaluation, listing and export, and
// forgets it: its recorded compile errors go with it, and new schemas do
// not bring it back.
func TestDeletedPolicyIsForgotten(t *testing.T) {
	e := policyEngine(t, policy("keep", nil, "false"), policy("gone", nil, "false"))
	e.SetPolicy(withVersion(policy("broken", nil, "object.spec.nope("), "1"))
	e.DeletePolicy("gone")
	e.DeletePolicy("broken")
	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	if diff := cmp.Diff([]string{"keep/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("after the delete (-want +got):\n%s", diff)
	}
	if _, ok := e.given["gone"]; ok {
		t.Error("a deleted policy is still given")
	}
	// A version that did not compile, deleted, then given again under the
	// same resourceVersion is compiled again rather than answered from a
	// forgotten record.
	if errs := e.SetPolicy(withVersion(policy("broken", nil, "true"), "1")); len(errs) > 0 {
		t.Errorf("the policy given again after its delete: %v", errs)
	}
	if err := e.SetSchemas(e.Schemas()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"keep/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("after new schemas (-want +got):\n%s", diff)
	}
	vaps, _ := e.Export()
	var names []string
	for _, v := range vaps {
		names = append(names, v.Name)
	}
	if diff := cmp.Diff([]string{"shepherd-policy-broken", "shepherd-policy-keep"}, names); diff != "" {
		t.Errorf("exported (-want +got):\n%s", diff)
	}
}

// candidatesOf is what Evaluate runs for a request for gr before narrowing
// by namespace: the snapshot's candidates with the changed policies over
// them.
func candidatesOf(e *Engine, gr schema.GroupResource) []*compiledRule {
	rules, _, changed := e.candidatesFor(gr)
	if changed != nil {
		rules = changed.apply(rules, gr)
	}
	return rules
}

// The candidate index follows the rule set: a policy added, narrowed to a
// kind, or deleted changes which rules a request for a resource is
// evaluated against.
func TestCandidateIndexFollowsPolicyChanges(t *testing.T) {
	e := policyEngine(t)
	tj := trainJobInput("CREATE", trainJob(nil, nil), nil)
	onRuntimes := func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.Resources[0].Kinds = []string{"ClusterTrainingRuntime"}
	}
	if errs := e.SetPolicy(policy("p", nil, "false")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := rules(e.Evaluate(context.Background(), tj)); len(got) != 1 {
		t.Fatalf("TrainJob policy: %v", got)
	}
	if errs := e.SetPolicy(policy("p", onRuntimes, "false")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := rules(e.Evaluate(context.Background(), tj)); len(got) != 0 {
		t.Errorf("the policy now on ClusterTrainingRuntimes still judges TrainJobs: %v", got)
	}
	crs := candidatesOf(e, schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "clustertrainingruntimes"})
	if len(crs) != 1 || crs[0].rule.ID != "p" {
		t.Errorf("candidates for clustertrainingruntimes: %d rules, want p", len(crs))
	}
	e.DeletePolicy("p")
	if crs := candidatesOf(e, schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "clustertrainingruntimes"}); len(crs) != 0 {
		t.Errorf("candidates after the delete: %d rules, want none", len(crs))
	}
}
