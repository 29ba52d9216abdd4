package celrules

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// policyEngine is an engine with only the given WorkloadPolicies (every
// built-in switched off), each of which must compile.
func policyEngine(t *testing.T, policies ...*shepherdv1alpha1.WorkloadPolicy) *Engine {
	t.Helper()
	rules, err := BuiltinRules()
	if err != nil {
		t.Fatal(err)
	}
	var off []string
	for _, r := range rules {
		off = append(off, r.ID)
	}
	e, err := NewEngine(Config{Schemas: seedSchemas(t), DisabledRules: off})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		if errs := e.SetPolicy(p); len(errs) > 0 {
			t.Fatalf("policy %s: %v", p.Name, errs)
		}
	}
	return e
}

// policy is a TrainJob policy whose validations fail with "<name>
// failed", changed by mutate.
func policy(name string, mutate func(*shepherdv1alpha1.WorkloadPolicySpec), validations ...string) *shepherdv1alpha1.WorkloadPolicy {
	b := testkit.TrainJobPolicy(name)
	for _, v := range validations {
		b.Validation(v, name+" failed")
	}
	p := b.Obj()
	if mutate != nil {
		mutate(&p.Spec)
	}
	return p
}

// trainJob is team-a's TrainJob tj with labels, and spec in place of its
// own when set.
func trainJob(labels map[string]any, spec map[string]any) map[string]any {
	b := testkit.TrainJob("team-a", "tj", "torch", 0)
	if labels != nil {
		b.Set(labels, "metadata", "labels")
	}
	if spec != nil {
		b.Set(spec, "spec")
	}
	return b.Map()
}

func trainJobInput(op string, obj, old map[string]any) *Input {
	return &Input{Operation: op, Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob", Resource: "trainjobs",
		Namespace: "team-a", Name: "tj", Object: obj, OldObject: old}
}

// rules lists the rule of each result, with its action.
func rules(res []Result) []string {
	var out []string
	for _, r := range res {
		out = append(out, fmt.Sprintf("%s/%s", r.Rule, r.Action))
	}
	return out
}

// The apiserver's object matcher never matches an absent object: on CREATE
// a NotIn selector is decided by the new object's labels alone.
func TestObjectSelectorNeverMatchesAnAbsentObject(t *testing.T) {
	notProd := policy("not-prod", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"prod"}}}}
	}, "false")
	e := policyEngine(t, notProd)
	for _, tt := range []struct {
		name     string
		op       string
		obj, old map[string]any
		want     []string
	}{
		{"CREATE labelled prod", "CREATE", trainJob(map[string]any{"env": "prod"}, nil), nil, nil},
		{"CREATE labelled dev", "CREATE", trainJob(map[string]any{"env": "dev"}, nil), nil, []string{"not-prod/Deny"}},
		{"CREATE unlabelled", "CREATE", trainJob(nil, nil), nil, []string{"not-prod/Deny"}},
		{"UPDATE prod to dev", "UPDATE", trainJob(map[string]any{"env": "dev"}, nil), trainJob(map[string]any{"env": "prod"}, nil), []string{"not-prod/Deny"}},
		{"UPDATE prod to prod", "UPDATE", trainJob(map[string]any{"env": "prod"}, nil), trainJob(map[string]any{"env": "prod"}, nil), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, rules(e.Evaluate(context.Background(), trainJobInput(tt.op, tt.obj, tt.old)))); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNamespaceSelector(t *testing.T) {
	p := policy("gpu-teams", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	}, "false")
	e := policyEngine(t, p)
	lookup := func(ns *corev1.Namespace) func(context.Context, string) (*corev1.Namespace, error) {
		return func(_ context.Context, name string) (*corev1.Namespace, error) {
			if ns == nil || ns.Name != name {
				return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
			}
			return ns, nil
		}
	}
	labelled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"gpu": "a100"}}}
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}

	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	in.Namespaces = lookup(labelled)
	if res := e.Evaluate(context.Background(), in); len(res) != 0 {
		t.Errorf("namespace with the label: %+v, want no match", res)
	}
	in.Namespaces = lookup(plain)
	if diff := cmp.Diff([]string{"gpu-teams/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" {
		t.Errorf("namespace without the label (-want +got):\n%s", diff)
	}
	// An unknown namespace is the apiserver's 404, not "no labels".
	in.Namespaces = lookup(nil)
	res := e.Evaluate(context.Background(), in)
	if len(res) != 1 || res[0].Action != shepherdv1alpha1.ActionDeny || !res[0].EvalError || !strings.Contains(res[0].Message, `namespaces "team-a" not found`) {
		t.Errorf("unknown namespace: %+v, want one Deny naming the missing namespace", res)
	}
}

// Each policy has its own runtime budget, as each VAP binding does: twelve
// policies that each spend most of the 10M budget all pass, and a policy
// over it fails alone.
func TestEachPolicyHasItsOwnBudget(t *testing.T) {
	// A 100,000-character string searched for a 900-character one costs
	// about 900,000 (just under the per-expression limit) and takes
	// microseconds: nine such validations spend ~8.1M of a policy's 10M.
	const heavy = "object.metadata.annotations['hay'].contains(object.metadata.annotations['needle'])"
	obj := trainJob(nil, nil)
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{"hay": strings.Repeat("a", 100_000), "needle": strings.Repeat("a", 900)}
	var ps []*shepherdv1alpha1.WorkloadPolicy
	for i := range 12 {
		vals := make([]string, 9)
		for j := range vals {
			vals[j] = heavy
		}
		ps = append(ps, policy(fmt.Sprintf("p%02d", i), nil, vals...))
	}
	e := policyEngine(t, ps...)
	in := trainJobInput("CREATE", obj, nil)
	for i := range 3 {
		if res := e.Evaluate(context.Background(), in); len(res) != 0 {
			t.Fatalf("evaluation %d: %v, want every policy to pass within its own budget", i, rules(res))
		}
	}
	over := make([]string, 12)
	for j := range over {
		over[j] = heavy
	}
	e = policyEngine(t, append(ps, policy("over", nil, over...))...)
	res := e.Evaluate(context.Background(), in)
	if diff := cmp.Diff([]string{"over/Deny"}, rules(res)); diff != "" {
		t.Fatalf("results (-want +got):\n%s", diff)
	}
	if !strings.Contains(res[0].Message, "budget") || !strings.HasSuffix(res[0].Message, costAdvice) {
		t.Errorf("message %q does not name the budget and say what to do", res[0].Message)
	}
}

// The same input gives the same verdict on every evaluation: nothing is
// merged, cached or warmed up between them.
func TestVerdictIsTheSameOnEveryEvaluation(t *testing.T) {
	var ps []*shepherdv1alpha1.WorkloadPolicy
	for i := range 12 {
		ps = append(ps, policy(fmt.Sprintf("p%02d", i), nil,
			"object.spec.trainer.args.all(a, a != 'forbidden')", "object.spec.trainer.args.exists(a, a == 'ok')"))
	}
	e := policyEngine(t, ps...)
	in := trainJobInput("CREATE", trainJob(nil, map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"args": []any{"ok", "forbidden"}}}), nil)
	first := rules(e.Evaluate(context.Background(), in))
	if len(first) != 12 {
		t.Fatalf("first evaluation: %v, want the 12 policies to deny", first)
	}
	for i := range 50 {
		if diff := cmp.Diff(first, rules(e.Evaluate(context.Background(), in))); diff != "" {
			t.Fatalf("evaluation %d differs from the first (-first +got):\n%s", i+2, diff)
		}
	}
}

func TestFailurePolicyAndActionOnErrors(t *testing.T) {
	failing := "object.spec.trainer.numNodes / 0 > 1"
	spec := map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"numNodes": int64(2)}}
	for _, tt := range []struct {
		name   string
		mutate func(*shepherdv1alpha1.WorkloadPolicySpec)
		want   []string
	}{
		{"Fail denies", nil, []string{"p/Deny"}},
		{"Ignore admits, audited", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.FailurePolicy = shepherdv1alpha1.FailurePolicyIgnore }, []string{"p/Audit"}},
		{"Warn rule warns", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Action = shepherdv1alpha1.ActionWarn }, []string{"p/Warn"}},
		{"matchCondition error, Fail", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "c", Expression: failing}}
			s.Validations[0].Expression = "true"
		}, []string{"p/Deny"}},
		{"matchCondition error, Ignore", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "c", Expression: failing}}
			s.Validations[0].Expression = "false"
			s.FailurePolicy = shepherdv1alpha1.FailurePolicyIgnore
		}, nil},
		{"false matchCondition skips", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "c", Expression: "false"}}
		}, nil},
		{"messageExpression error falls back to message", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Validations[0].Expression = "false"
			s.Validations[0].MessageExpression = "string(object.spec.trainer.numNodes / 0)"
		}, []string{"p/Deny"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := policyEngine(t, policy("p", tt.mutate, failing))
			res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, spec), nil))
			if diff := cmp.Diff(tt.want, rules(res)); diff != "" {
				t.Fatalf("results (-want +got):\n%s", diff)
			}
			if strings.HasPrefix(tt.name, "messageExpression") && res[0].Message != "p failed (shepherd p)" {
				t.Errorf("message %q, want the static message, naming the rule", res[0].Message)
			}
		})
	}
}

func TestPoliciesThatCanNeverFireAreRefused(t *testing.T) {
	e := policyEngine(t)
	for _, tt := range []struct {
		name   string
		mutate func(*shepherdv1alpha1.WorkloadPolicySpec)
		field  string
	}{
		{"DELETE", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Operations = []string{"DELETE"} }, "spec.match.resources[0].operations[0]"},
		{"CONNECT", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Match.Resources[0].Operations = []string{"CREATE", "CONNECT"}
		}, "spec.match.resources[0].operations[1]"},
		{"wildcard operation", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Operations = []string{"*"} }, "spec.match.resources[0].operations[0]"},
		{"misspelled kind", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Kinds = []string{"Trainjob"} }, "spec.match.resources[0].kinds[0]"},
		{"kind of another group", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Kinds = []string{"JobSet"} }, "spec.match.resources[0].kinds[0]"},
		{"unknown resource", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
			s.Match.Resources[0].Kinds = nil
			s.Match.Resources[0].Resources = []string{"trainjob"}
		}, "spec.match.resources[0].resources[0]"},
		{"group not sent", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].APIGroups = []string{"batch"} }, "spec.match.resources[0].apiGroups[0]"},
		{"wildcard group", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].APIGroups = []string{"*"} }, "spec.match.resources[0].apiGroups[0]"},
		{"fieldPath that does not parse", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Validations[0].FieldPath = "spec..trainer[x" }, "spec.validations[0].fieldPath"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := e.SetPolicy(policy("p", tt.mutate, "true"))
			if len(errs) != 1 || errs[0].Field != tt.field {
				t.Fatalf("errors %v, want one on %s", errs, tt.field)
			}
		})
	}
	if errs := e.SetPolicy(policy("ok", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.Resources[0].Operations = []string{"UPDATE"}
		s.Validations[0].FieldPath = "metadata.labels['app']"
	}, "true")); len(errs) != 0 {
		t.Errorf("a policy in scope was refused: %v", errs)
	}
}

func TestExportedBindingLeavesOutSystemAndShepherdNamespaces(t *testing.T) {
	e := policyEngine(t, policy("p", nil, "true"))
	_, bindings := e.Export()
	if len(bindings) != 1 {
		t.Fatalf("%d bindings, want 1", len(bindings))
	}
	got := bindings[0].Spec.MatchResources.NamespaceSelector
	want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "shepherd-system"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("namespaceSelector (-want +got):\n%s", diff)
	}
}

// Version changes with every change to the rule set and only then: a
// policy set (compiled or not), deleted, or new schemas; a resync of the
// same policy version, or deleting a policy never set, leaves it.
func TestVersionChangesWithTheRuleSet(t *testing.T) {
	e := policyEngine(t)
	v := e.Version()
	step := func(what string, changes bool, do func()) {
		t.Helper()
		do()
		got := e.Version()
		if (got != v) != changes {
			t.Errorf("%s: version %d -> %d, want changed=%t", what, v, got, changes)
		}
		v = got
	}
	p := policy("p", nil, "has(object.spec.trainer)")
	p.ResourceVersion = "1"
	step("set", true, func() { e.SetPolicy(p) })
	step("same resourceVersion again", false, func() { e.SetPolicy(p) })
	bad := policy("p", nil, "object.spec.nope(")
	bad.ResourceVersion = "2"
	step("a version that does not compile", true, func() { e.SetPolicy(bad) })
	step("delete", true, func() { e.DeletePolicy("p") })
	step("delete of a policy never set", false, func() { e.DeletePolicy("never") })
	step("schemas", true, func() {
		if err := e.SetSchemas(e.Schemas()); err != nil {
			t.Fatal(err)
		}
	})
}

// namespaceObject is the request's Namespace, looked up only for the rules
// that read it.
func TestNamespaceObjectIsLookedUpOnlyForTheRulesThatReadIt(t *testing.T) {
	reads := policy("reads-namespace", nil, "namespaceObject.metadata.?labels.?tier.orValue('') == 'gpu'")
	plain := policy("plain", nil, "has(object.spec)")
	lookups := 0
	lookup := func(ns *corev1.Namespace) func(context.Context, string) (*corev1.Namespace, error) {
		return func(context.Context, string) (*corev1.Namespace, error) {
			lookups++
			return ns, nil
		}
	}
	gpu := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tier": "gpu"}}}
	cpu := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tier": "cpu"}}}

	e := policyEngine(t, reads, plain)
	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	in.Namespaces = lookup(gpu)
	if res := e.Evaluate(context.Background(), in); len(res) != 0 || lookups != 1 {
		t.Errorf("a gpu namespace: %+v after %d lookups, want none after 1", res, lookups)
	}
	lookups = 0
	in.Namespaces = lookup(cpu)
	if diff := cmp.Diff([]string{"reads-namespace/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" || lookups != 1 {
		t.Errorf("a cpu namespace after %d lookups (want 1), results (-want +got):\n%s", lookups, diff)
	}

	lookups = 0
	e = policyEngine(t, plain)
	if res := e.Evaluate(context.Background(), in); len(res) != 0 || lookups != 0 {
		t.Errorf("no rule reads namespaceObject: %+v after %d lookups, want none after none", res, lookups)
	}
}
