package celrules

import (
	"sort"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/go-cmp/cmp"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

func TestReadsOf(t *testing.T) {
	for _, tc := range []struct {
		expr          string
		want          []string
		unconditional string
	}{
		{"object.spec.replicas > 1", []string{"spec"}, ""},
		{"has(object.spec.template) && oldObject.spec.x == object.spec.x", []string{"spec"}, ""},
		{"object.metadata.?labels['team'].orValue('') != ''", []string{"metadata.labels"}, ""},
		{"object['metadata']['annotations']['a'] == 'b'", []string{"metadata.annotations"}, ""},
		{"object.metadata.finalizers.all(f, f != 'x')", []string{"metadata.finalizers"}, ""},
		{"object.spec.cliques.all(c, c.spec.replicas > 0) && variables.x", []string{"spec"}, ""},
		{"object.status.phase == 'Running'", []string{"status"}, ""},
		{"size(object.metadata) > 2", []string{"metadata"}, ""},
		{"object == oldObject", []string{"*"}, ""},
		{"oldObject == null || oldObject.spec.x == object.spec.x", []string{"spec"}, ""},
		{"null != object.metadata.labels", []string{"metadata.labels"}, ""},
		{"(true ? object : oldObject).spec.x == 1", []string{"*"}, ""},
		{"request.operation == 'CREATE' && request.namespace != 'x'", nil, ""},
		{"request.userInfo.username == 'alice'", nil, "reads request.userInfo"},
		{"request.dryRun", nil, "reads request.dryRun"},
		{"authorizer.group('').resource('x').check('get').allowed()", nil, "asks the authorizer"},
		{"namespaceObject.metadata.labels.env == 'prod'", nil, ""},
		{"this is not cel (", []string{"*"}, ""},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			regions := map[string]bool{}
			why := readsOf(tc.expr, regions)
			var got []string
			for r := range regions {
				got = append(got, r)
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("regions (-want +got):\n%s", diff)
			}
			if why != tc.unconditional {
				t.Errorf("unconditional %q, want %q", why, tc.unconditional)
			}
		})
	}
}

func TestUpdateMatchCondition(t *testing.T) {
	if _, ok := (Reads{Regions: []string{"spec"}, Unconditional: "V-1 reads request.userInfo"}).UpdateMatchCondition(); ok {
		t.Errorf("a rule reading the user still gets a condition")
	}
	if _, ok := (Reads{Regions: []string{"*", "spec"}}).UpdateMatchCondition(); ok {
		t.Errorf("a rule reading the whole object still gets a condition")
	}
	expr, ok := (Reads{Regions: []string{"metadata.labels", "spec"}}).UpdateMatchCondition()
	if !ok {
		t.Fatal("no condition for spec and labels")
	}
	env, err := cel.NewEnv(cel.OptionalTypes(), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	obj := func(labels map[string]any, finalizers []any, spec map[string]any) map[string]any {
		md := map[string]any{"name": "a"}
		if labels != nil {
			md["labels"] = labels
		}
		if finalizers != nil {
			md["finalizers"] = finalizers
		}
		o := map[string]any{"metadata": md}
		if spec != nil {
			o["spec"] = spec
		}
		return o
	}
	spec := map[string]any{"replicas": int64(1)}
	for _, tc := range []struct {
		name     string
		op       string
		new, old map[string]any
		want     bool
	}{
		{"a create is always sent", "CREATE", obj(nil, nil, spec), nil, true},
		{"a finalizer added is not", "UPDATE", obj(nil, []any{"f"}, spec), obj(nil, nil, spec), false},
		{"nothing changed is not", "UPDATE", obj(map[string]any{"a": "b"}, nil, spec), obj(map[string]any{"a": "b"}, nil, spec), false},
		{"a spec change is", "UPDATE", obj(nil, nil, map[string]any{"replicas": int64(2)}), obj(nil, nil, spec), true},
		{"a spec removed is", "UPDATE", obj(nil, nil, nil), obj(nil, nil, spec), true},
		{"a label added is", "UPDATE", obj(map[string]any{"team": "a"}, nil, spec), obj(nil, nil, spec), true},
		{"a label changed is", "UPDATE", obj(map[string]any{"team": "a"}, nil, spec), obj(map[string]any{"team": "b"}, nil, spec), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.new, "oldObject": tc.old, "request": map[string]any{"operation": tc.op}}
			if tc.old == nil {
				vars["oldObject"] = nil
			}
			out, _, err := prg.Eval(vars)
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			if out.Value() != tc.want {
				t.Errorf("%s = %v, want %v", expr, out.Value(), tc.want)
			}
		})
	}
}

func TestEngineUpdateReads(t *testing.T) {
	e := policyEngine(t)
	base := e.UpdateReads()
	if diff := cmp.Diff(Reads{Regions: GoReads}, base); diff != "" {
		t.Errorf("built-ins only (-want +got):\n%s", diff)
	}
	v := e.Version()
	// A policy reading the finalizers in a variable and a matchCondition.
	if errs := e.SetPolicy(policy("finalizers", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "owned", Expression: "has(object.metadata.ownerReferences)"}}
		s.Variables = []shepherdv1alpha1.Variable{{Name: "f", Expression: "object.metadata.?finalizers.orValue([])"}}
	}, "size(variables.f) < 3")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if e.Version() == v {
		t.Errorf("SetPolicy did not change the rule set's version")
	}
	got := e.UpdateReads()
	want := append([]string{}, GoReads...)
	want = append(want, "metadata.finalizers")
	sort.Strings(want)
	if diff := cmp.Diff(Reads{Regions: want}, got); diff != "" {
		t.Errorf("with a policy on finalizers (-want +got):\n%s", diff)
	}
	// One reading the user: every UPDATE matters, and it says which.
	if errs := e.SetPolicy(policy("who", nil, "request.userInfo.username != 'x'")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := e.UpdateReads(); got.Unconditional != "who reads request.userInfo" {
		t.Errorf("unconditional = %q", got.Unconditional)
	}
	e.DeletePolicy("who")
	if got := e.UpdateReads(); got.Unconditional != "" {
		t.Errorf("after deleting the policy on the user: unconditional = %q", got.Unconditional)
	}
}
