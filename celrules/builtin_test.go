package celrules

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

func TestBuiltinLibraryCompiles(t *testing.T) {
	rules, err := CompileBuiltins()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rules {
		ids[r.rule.ID] = true
	}
	for _, id := range []string{"V-TJ-1", "V-TJ-2", "V-TR-1", "V-TR-2", "V-TR-3", "V-TR-4", "V-TR-5", "V-TR-6", "V-TR-8", "V-TR-9",
		"V-PCS-1", "V-PCS-2", "V-PCS-3", "V-PCS-4", "V-PCS-5", "V-PCS-6", "V-PCS-7", "V-PCS-8", "V-JS-1", "V-JS-2", "V-JS-3", "V-JS-4", "V-JS-5"} {
		if !ids[id] {
			t.Errorf("built-in library lacks %s", id)
		}
	}
}

func TestSchemasCoverShepherdKinds(t *testing.T) {
	s, err := LoadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, gk := range []schema.GroupKind{
		{Group: "trainer.kubeflow.org", Kind: "TrainJob"}, {Group: "trainer.kubeflow.org", Kind: "TrainingRuntime"},
		{Group: "trainer.kubeflow.org", Kind: "ClusterTrainingRuntime"}, {Group: "grove.io", Kind: "PodCliqueSet"},
		{Group: "grove.io", Kind: "PodClique"}, {Group: "grove.io", Kind: "PodCliqueScalingGroup"},
		{Group: "jobset.x-k8s.io", Kind: "JobSet"}, {Group: "shepherd.dev", Kind: "WorkloadPolicy"},
	} {
		if len(s.Versions(gk)) == 0 {
			t.Errorf("no schema for %v", gk)
		}
	}
}

func trainJobRule(id string, v shepherdv1alpha1.Validation, vars ...shepherdv1alpha1.Variable) Rule {
	return Rule{ID: id, WorkloadPolicySpec: shepherdv1alpha1.WorkloadPolicySpec{
		Match:       shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}}}},
		Variables:   vars,
		Validations: []shepherdv1alpha1.Validation{v},
	}}
}

func TestMisspelledFieldIsALoadErrorWithPathAndPosition(t *testing.T) {
	s, err := LoadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	tc := newTypeChecker(s)
	for name, tt := range map[string]struct {
		rule  Rule
		field string
		typo  string
	}{
		"validation": {trainJobRule("r", shepherdv1alpha1.Validation{Expression: "object.spec.activeDeadlineSecond > 0"}),
			"spec.validations[0].expression", "activeDeadlineSecond"},
		"messageExpression": {trainJobRule("r", shepherdv1alpha1.Validation{Expression: "true", MessageExpression: "string(object.spec.trainer.numNode)"}),
			"spec.validations[0].messageExpression", "numNode"},
		"variable": {trainJobRule("r", shepherdv1alpha1.Validation{Expression: "variables.n > 0"}, shepherdv1alpha1.Variable{Name: "n", Expression: "object.spec.trainr.numNodes"}),
			"spec.variables[0].expression", "trainr"},
		"nested in PodSpec": {Rule{ID: "r", WorkloadPolicySpec: shepherdv1alpha1.WorkloadPolicySpec{
			Match:       shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"grove.io"}, Kinds: []string{"PodCliqueSet"}}}},
			Validations: []shepherdv1alpha1.Validation{{Expression: "object.spec.template.cliques.all(c, c.spec.podSpec.restartPolicyy == 'Never')"}},
		}}, "spec.validations[0].expression", "restartPolicyy"},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := compileRule(tt.rule, SourcePolicy, environment.NewExpressions, tc)
			if len(errs) != 1 {
				t.Fatalf("errors %v, want exactly one", errs)
			}
			if errs[0].Field != tt.field || !strings.Contains(errs[0].Detail, "undefined field '"+tt.typo+"'") || !strings.Contains(errs[0].Detail, "<input>:1:") {
				t.Errorf("error %q on %s, want an undefined-field error with position on %s", errs[0].Detail, errs[0].Field, tt.field)
			}
		})
	}
	// Without the type checker the same typo compiles: proof that the
	// error above comes from the schema, not from the parser.
	if _, errs := compileRule(trainJobRule("r", shepherdv1alpha1.Validation{Expression: "object.spec.activeDeadlineSecond > 0"}), SourcePolicy, environment.NewExpressions, nil); len(errs) != 0 {
		t.Errorf("untyped compile failed: %v", errs)
	}
}

func TestBuiltinCompileErrorNamesTheRule(t *testing.T) {
	_, errs := compileRule(trainJobRule("V-X-1", shepherdv1alpha1.Validation{Expression: "object.spec.activeDeadlineSeconds"}), SourceBuiltin, environment.NewExpressions, nil)
	if len(errs) != 1 || !strings.Contains(errs[0].Detail, "must evaluate to bool") {
		t.Fatalf("errors %v", errs)
	}
}

func TestShapeErrors(t *testing.T) {
	r := trainJobRule("r", shepherdv1alpha1.Validation{Expression: "true"})
	r.Action = "Block"
	r.Match.Resources[0].Operations = []string{"PATCH"}
	reason := metav1.StatusReason("Teapot")
	r.Validations[0].Reason = &reason
	_, errs := compileRule(r, SourcePolicy, environment.NewExpressions, nil)
	fields := map[string]bool{}
	for _, e := range errs {
		fields[e.Field] = true
	}
	for _, f := range []string{"spec.action", "spec.match.resources[0].operations[0]", "spec.validations[0].reason"} {
		if !fields[f] {
			t.Errorf("no error on %s: %v", f, errs)
		}
	}
}

func TestSetPolicyCachesByResourceVersion(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "1"}, Spec: trainJobRule("", shepherdv1alpha1.Validation{Expression: "true"}).WorkloadPolicySpec}
	if errs := e.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	first := e.policies["p"]
	e.SetPolicy(p.DeepCopy())
	if e.policies["p"] != first {
		t.Error("the same resourceVersion was compiled again")
	}
	p.ResourceVersion = "2"
	e.SetPolicy(p)
	if e.policies["p"] == first {
		t.Error("a new resourceVersion was not compiled")
	}
}

func TestExportUsesExplicitVersionsAndActions(t *testing.T) {
	e, err := NewEngine(Config{DisabledRules: []string{"V-TJ-2"}})
	if err != nil {
		t.Fatal(err)
	}
	vaps, bindings := e.Export()
	seen := map[string]bool{}
	for i, v := range vaps {
		seen[v.Name] = true
		if bindings[i].Spec.PolicyName != v.Name {
			t.Errorf("binding %s names policy %s", bindings[i].Name, bindings[i].Spec.PolicyName)
		}
		for _, rr := range v.Spec.MatchConstraints.ResourceRules {
			for _, ver := range rr.APIVersions {
				if ver == "*" {
					t.Errorf("%s: wildcard version: the apiserver would not type-check it", v.Name)
				}
			}
		}
		if v.Name == "shepherd-v-tr-2" && bindings[i].Spec.ValidationActions[0] != admissionregistrationv1.Warn {
			t.Errorf("V-TR-2 bound with %v", bindings[i].Spec.ValidationActions)
		}
	}
	if seen["shepherd-v-tj-2"] || !seen["shepherd-v-tj-1"] {
		t.Errorf("disabled rule exported or enabled rule missing: %v", seen)
	}
}
