package celrules

import (
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

var fourHours = &metav1.Duration{Duration: 4 * time.Hour}

// exportAll exports with D-PCS-5 configured so that every rule has a policy
// where the schemas allow it.
func exportAll(t *testing.T, s *Schemas) ([]*admissionregistrationv1.MutatingAdmissionPolicy, []*admissionregistrationv1.MutatingAdmissionPolicyBinding, []NotExported) {
	t.Helper()
	ps, bs, skipped, err := ExportDefaults(Config{Schemas: s, InferenceTerminationDelay: fourHours})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(bs) {
		t.Fatalf("%d policies, %d bindings", len(ps), len(bs))
	}
	return ps, bs, skipped
}

func pinnedSchemas(t *testing.T) *Schemas {
	t.Helper()
	s, err := PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func policyIDs(ps []*admissionregistrationv1.MutatingAdmissionPolicy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Labels[LabelRule])
	}
	return out
}

// Every policy type-checks against the schemas it was exported for (the
// seed-shaped ones and the pinned upstream ones), and nothing but the
// rules that do nothing there is left out.
func TestDefaultsExportAndTypeCheckAgainstSeedAndUpstreamSchemas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       *Schemas
		want    []string
		skipped []string
	}{
		{"seed", seedSchemas(t), DefaultRuleIDs(), nil},
		{"upstream", pinnedSchemas(t), slices.DeleteFunc(DefaultRuleIDs(), func(id string) bool { return id == "D-PCS-2" }), []string{"D-PCS-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, _, skipped := exportAll(t, tc.s)
			if got := policyIDs(ps); !slices.Equal(got, tc.want) {
				t.Errorf("exported %v, want %v (not exported: %+v)", got, tc.want, skipped)
			}
			var got []string
			for _, n := range skipped {
				got = append(got, n.ID)
				if strings.HasPrefix(n.Reason, "inactive") {
					t.Errorf("%s does not type-check: %s", n.ID, n.Reason)
				}
			}
			if !slices.Equal(got, tc.skipped) {
				t.Errorf("not exported %+v, want %v", skipped, tc.skipped)
			}
		})
	}
}

// The apiserver accepts a MutatingAdmissionPolicy only when its expressions
// compile in its own (untyped) environment: compile them as its
// mutating-policy plugin does, with the environment of new expressions.
func TestDefaultsCompileAsTheApiserverCompilesThem(t *testing.T) {
	for _, s := range []*Schemas{seedSchemas(t), pinnedSchemas(t)} {
		ps, _, _ := exportAll(t, s)
		for _, p := range ps {
			comp, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
			if err != nil {
				t.Fatal(err)
			}
			opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
			for _, v := range p.Spec.Variables {
				if res := comp.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.NewExpressions); res.Error != nil {
					t.Errorf("%s: variable %s: %v", p.Name, v.Name, res.Error)
				}
			}
			for i := range p.Spec.MatchConditions {
				c := comp.CompileCondition([]plugincel.ExpressionAccessor{(*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])}, opts, environment.NewExpressions)
				for _, err := range c.CompilationErrors() {
					t.Errorf("%s: matchCondition %s: %v", p.Name, p.Spec.MatchConditions[i].Name, err)
				}
			}
			popts := opts
			popts.HasPatchTypes = true
			for i, m := range p.Spec.Mutations {
				e := comp.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, popts, environment.NewExpressions)
				for _, err := range e.CompilationErrors() {
					t.Errorf("%s: mutation %d: %v", p.Name, i, err)
				}
			}
		}
	}
}

// The type check is not vacuous: a misspelled field in a variable, a
// matchCondition or a patch fails it, with the expression's path.
func TestDefaultsTypeCheckFindsAMisspelledField(t *testing.T) {
	s := seedSchemas(t)
	var d6 mapdefault.Rule
	for _, r := range integrations.Defaults() {
		if r.ID == "D-PCS-6" {
			d6 = r
		}
	}
	body, _ := d6.Build(mapdefault.Context{Schemas: s, Enabled: Config{}.Enabled})
	if p, _ := exportDefault(d6, body, s, ""); len(typeCheckMAP(p, d6.Kind, s)) > 0 {
		t.Fatalf("D-PCS-6 as exported does not type-check: %v", typeCheckMAP(p, d6.Kind, s))
	}
	for _, tc := range []struct {
		path string
		edit func(*mapdefault.Body)
	}{
		{"spec.mutations[0].jsonPatch.expression", func(b *mapdefault.Body) {
			b.Patches[0] = strings.Replace(b.Patches[0], "c.spec.?minAvailable", "c.spec.?minAvailabel", 1)
		}},
		{"spec.matchConditions[1].expression", func(b *mapdefault.Body) {
			b.MatchConditions = append(b.MatchConditions, mapdefault.Cond("typo", "has(object.spec.templat)"))
		}},
		{"spec.variables[0].expression", func(b *mapdefault.Body) {
			b.Variables = append(b.Variables, admissionregistrationv1.Variable{Name: "typo", Expression: "object.spec.replica"})
		}},
	} {
		b, _ := d6.Build(mapdefault.Context{Schemas: s, Enabled: Config{}.Enabled})
		b.Patches = slices.Clone(b.Patches)
		tc.edit(&b)
		p, _ := exportDefault(d6, b, s, "")
		errs := typeCheckMAP(p, d6.Kind, s)
		if len(errs) != 1 || errs[0].Field != tc.path || !strings.Contains(errs[0].Detail, "undefined field") {
			t.Errorf("%s: got %v, want one undefined field at %s", tc.path, errs, tc.path)
		}
	}
}

func mutationText(p *admissionregistrationv1.MutatingAdmissionPolicy) string {
	var sb strings.Builder
	for _, m := range p.Spec.Mutations {
		sb.WriteString(m.JSONPatch.Expression)
	}
	return sb.String()
}

func policyFor(t *testing.T, ps []*admissionregistrationv1.MutatingAdmissionPolicy, id string) *admissionregistrationv1.MutatingAdmissionPolicy {
	t.Helper()
	for _, p := range ps {
		if p.Labels[LabelRule] == id {
			return p
		}
	}
	t.Fatalf("no policy for %s in %v", id, policyIDs(ps))
	return nil
}

// A seed knob is written where the schemas keep it: the field on the
// seed-shaped schemas, the carrier annotation on the upstream ones.
func TestDefaultsWriteTheFormTheSchemasKeep(t *testing.T) {
	seed, _, _ := exportAll(t, seedSchemas(t))
	upstream, _, _ := exportAll(t, pinnedSchemas(t))
	for _, tc := range []struct {
		id, field, carrier string
	}{
		{"D-PCS-1", "path: '/spec/workloadType'", "jsonpatch.escapeKey('" + api.AnnotationWorkloadType + "')"},
		{"D-PCS-4", "path: '/spec/trainingSpec/maxRestarts'", "jsonpatch.escapeKey('" + api.AnnotationMaxRestarts + "')"},
	} {
		if m := mutationText(policyFor(t, seed, tc.id)); !strings.Contains(m, tc.field) || strings.Contains(m, "annotations") {
			t.Errorf("%s on the seed-shaped schemas: want the field (%s), got %s", tc.id, tc.field, m)
		}
		if m := mutationText(policyFor(t, upstream, tc.id)); !strings.Contains(m, tc.carrier) || strings.Contains(m, tc.field) {
			t.Errorf("%s on the upstream schemas: want the carrier (%s), got %s", tc.id, tc.carrier, m)
		}
	}
}

// The configuration decides what is exported, as it decides what the Go
// defaulters do.
func TestDefaultsFollowTheConfig(t *testing.T) {
	s := seedSchemas(t)
	ps, _, skipped, err := ExportDefaults(Config{Schemas: s})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(policyIDs(ps), "D-PCS-5") || !slices.ContainsFunc(skipped, func(n NotExported) bool {
		return n.ID == "D-PCS-5" && strings.Contains(n.Reason, "--inference-termination-delay")
	}) {
		t.Errorf("without a configured delay D-PCS-5 must be listed as not exported: %v, %+v", policyIDs(ps), skipped)
	}
	if m := mutationText(policyFor(t, ps, "D-JS-2")); !strings.Contains(m, "'remove', path: '/spec/startupPolicy'") {
		t.Errorf("D-JS-2 does not rewrite: %s", m)
	}

	ps, _, _ = exportAll(t, s)
	if m := mutationText(policyFor(t, ps, "D-PCS-5")); !strings.Contains(m, "value: '4h0m0s'") {
		t.Errorf("D-PCS-5 does not default to the configured 4h: %s", m)
	}
	// With D-PCS-1 on, an unset workload type is Inference for D-PCS-5;
	// with it off, it is no type at all.
	if c := policyFor(t, ps, "D-PCS-5").Spec.MatchConditions; !strings.Contains(c[1].Expression, "orValue('Inference') == 'Inference'") {
		t.Errorf("D-PCS-5 with D-PCS-1 on: %s", c[1].Expression)
	}
	ps, _, _, err = ExportDefaults(Config{Schemas: s, InferenceTerminationDelay: fourHours, DisabledRules: []string{"D-PCS-1", "D-PCS-6"}, DisableStartupPolicyRewrite: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := policyIDs(ps)
	if slices.Contains(ids, "D-PCS-1") || slices.Contains(ids, "D-PCS-6") || slices.Contains(ids, "D-JS-2") {
		t.Errorf("exported %v with D-PCS-1 and D-PCS-6 disabled and the rewrite off", ids)
	}
	if c := policyFor(t, ps, "D-PCS-5").Spec.MatchConditions; !strings.Contains(c[1].Expression, "orValue('') == 'Inference'") {
		t.Errorf("D-PCS-5 with D-PCS-1 off: %s", c[1].Expression)
	}
}

// Policies and bindings are named and scoped like the exported
// ValidatingAdmissionPolicies: never kube-system nor shepherd's namespace.
func TestDefaultsBindingsLeaveOutSystemAndShepherdNamespaces(t *testing.T) {
	ps, bs, _, err := ExportDefaults(Config{Schemas: seedSchemas(t), Namespace: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bs {
		p := ps[i]
		if b.Spec.PolicyName != p.Name || p.Name != PolicyName(p.Labels[LabelRule], SourceBuiltin) {
			t.Errorf("policy %s, binding %s for %s", p.Name, b.Spec.PolicyName, p.Labels[LabelRule])
		}
		ns := b.Spec.MatchResources.NamespaceSelector.MatchExpressions
		if len(ns) != 1 || ns[0].Operator != metav1.LabelSelectorOpNotIn || !slices.Equal(ns[0].Values, []string{api.SystemNamespace, "ops"}) {
			t.Errorf("%s: namespaceSelector %+v", b.Name, ns)
		}
		ops := p.Spec.MatchConstraints.ResourceRules[0].Operations
		if !slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) || p.Spec.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
			t.Errorf("%s: operations %v, reinvocation %s", p.Name, ops, p.Spec.ReinvocationPolicy)
		}
	}
}
