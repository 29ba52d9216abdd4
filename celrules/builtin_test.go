package celrules

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

func TestBuiltinLibraryCompiles(t *testing.T) {
	rules, inactive, err := CompileBuiltins(seedSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(inactive) > 0 {
		t.Errorf("built-in rules inactive against the seed-shaped schemas: %v", inactive)
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
	s := seedSchemas(t)
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
	s := seedSchemas(t)
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
			_, errs := compileRule(tt.rule, SourcePolicy, environment.NewExpressions, s)
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
	e, err := NewEngine(Config{Schemas: seedSchemas(t)})
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
	e, err := NewEngine(Config{DisabledRules: []string{"V-TJ-2"}, Schemas: seedSchemas(t)})
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

// TestBuiltinsAllActiveAgainstUpstreamSchemas: against the pinned upstream
// CRDs every built-in rule type-checks — the rules on seed knobs read their
// carriers there — so none is inactive, silently dead or denying everything.
func TestBuiltinsAllActiveAgainstUpstreamSchemas(t *testing.T) {
	s, err := PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	_, inactive, err := CompileBuiltins(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(inactive) > 0 {
		t.Errorf("built-ins inactive against %s: %v", s.Source, inactive)
	}
}

// withoutField returns the pinned upstream CRDs with one property removed
// from a CRD's schema: a cluster serving an older or narrower version.
func withoutField(t *testing.T, crdName string, path ...string) *Schemas {
	t.Helper()
	crds, err := pinned.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	found := false
	for _, c := range crds {
		c = c.DeepCopy()
		if c.Name == crdName {
			for i := range c.Spec.Versions {
				found = dropProperty(c.Spec.Versions[i].Schema.OpenAPIV3Schema, path) || found
			}
		}
		out = append(out, c)
	}
	if !found {
		t.Fatalf("%s has no %v", crdName, path)
	}
	s, err := NewSchemas(out, "upstream CRDs without "+crdName+" "+strings.Join(path, "."))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dropProperty(s *apiextensionsv1.JSONSchemaProps, path []string) bool {
	child, ok := s.Properties[path[0]]
	if !ok {
		return false
	}
	if len(path) == 1 {
		delete(s.Properties, path[0])
		return true
	}
	found := dropProperty(&child, path[1:])
	s.Properties[path[0]] = child
	return found
}

// TestEngineFollowsSchemaChanges: a rule whose field the cluster's schema
// lacks is inactive with a reason naming the field, and active again when
// the field comes back; a policy given earlier is compiled again each time.
func TestEngineFollowsSchemaChanges(t *testing.T) {
	e, err := NewEngine(Config{Schemas: seedSchemas(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ttl", ResourceVersion: "1"}, Spec: shepherdv1alpha1.WorkloadPolicySpec{
		Match:       shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"ClusterTrainingRuntime"}}}},
		Validations: []shepherdv1alpha1.Validation{{Expression: "object.spec.?ttlSecondsAfterFinished.orValue(0) < 86400", Message: "at most a day"}},
	}}
	if errs := e.SetPolicy(p); len(errs) > 0 {
		t.Fatalf("policy on a seed field against the seed schemas: %v", errs)
	}
	if len(e.Inactive()) != 0 {
		t.Fatalf("inactive against the seed schemas: %v", e.Inactive())
	}
	narrow := withoutField(t, "jobsets.jobset.x-k8s.io", "spec", "startupPolicy")
	if err := e.SetSchemas(narrow); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"V-JS-1", "V-JS-2", "V-JS-5"} {
		if reason, ok := e.Inactive()[id]; !ok || !strings.Contains(reason, "startupPolicy") {
			t.Errorf("%s against a JobSet schema without startupPolicy: inactive=%v reason %q", id, ok, reason)
		}
	}
	listed := false
	for _, r := range e.Rules() {
		if r.ID == "V-JS-1" {
			listed = r.Inactive != "" && !r.Exportable
		}
	}
	if !listed {
		t.Error("an inactive rule is not listed as inactive and unexported")
	}
	if errs := e.SetPolicy(p); len(errs) == 0 {
		t.Errorf("policy on runtime ttlSecondsAfterFinished compiles against the upstream schemas")
	}
	for _, r := range e.Rules() {
		if r.ID == "ttl" {
			t.Errorf("a policy that no longer compiles is still listed as active")
		}
	}
	if err := e.SetSchemas(seedSchemas(t)); err != nil {
		t.Fatal(err)
	}
	if len(e.Inactive()) != 0 {
		t.Errorf("inactive after the seed schemas came back: %v", e.Inactive())
	}
	if errs := e.SetPolicy(p); len(errs) > 0 {
		t.Errorf("policy does not compile again after its field came back: %v", errs)
	}
}
