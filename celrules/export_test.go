package celrules

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

func TestPolicyName(t *testing.T) {
	for _, tc := range []struct {
		id     string
		source Source
		want   string
	}{
		{"V-TJ-1", SourceBuiltin, "shepherd-v-tj-1"},
		{"V-PCS-10", SourceBuiltin, "shepherd-v-pcs-10"},
		{"max-day", SourcePolicy, "shepherd-policy-max-day"},
		{"Mixed", SourcePolicy, "shepherd-policy-Mixed"}, // a policy's name is already a DNS name
		{"D-JS-2", SourceGo, "shepherd-d-js-2"},
	} {
		if got := PolicyName(tc.id, tc.source); got != tc.want {
			t.Errorf("PolicyName(%q, %s) = %q, want %q", tc.id, tc.source, got, tc.want)
		}
	}
}

// Named ends a message with the rule once; Unnamed takes it off again and
// leaves any other message alone.
func TestNamedAndUnnamed(t *testing.T) {
	for _, tc := range []struct {
		id, message, named string
	}{
		{"V-TJ-1", "too long", "too long (shepherd V-TJ-1)"},
		{"V-TJ-1", "too long (shepherd V-TJ-1)", "too long (shepherd V-TJ-1)"},
		{"V-TJ-1", "too long (shepherd V-TJ-2)", "too long (shepherd V-TJ-2) (shepherd V-TJ-1)"},
		{"V-TJ-1", "as (shepherd V-TJ-1) said", "as (shepherd V-TJ-1) said (shepherd V-TJ-1)"},
		{"", "no rule", "no rule"},
		{"p", "", " (shepherd p)"},
	} {
		named := Named(tc.id, tc.message)
		if named != tc.named {
			t.Errorf("Named(%q, %q) = %q, want %q", tc.id, tc.message, named, tc.named)
		}
		if tc.id != "" && tc.message == "too long" {
			if got := Unnamed(tc.id, named); got != tc.message {
				t.Errorf("Unnamed(%q, %q) = %q, want %q", tc.id, named, got, tc.message)
			}
		}
	}
	if got := Unnamed("V-TJ-1", "too long (shepherd V-TJ-2)"); got != "too long (shepherd V-TJ-2)" {
		t.Errorf("Unnamed took off another rule's name: %q", got)
	}
	if got := Unnamed("V-TJ-1", "as (shepherd V-TJ-1) said"); got != "as (shepherd V-TJ-1) said" {
		t.Errorf("Unnamed took the name from the middle: %q", got)
	}
}

// An exported policy's messages name the rule: a static message (or the
// apiserver's fallback text when there is none) directly, a
// messageExpression's text when it gives one, and no text when it gives a
// blank one (the apiserver then falls back on the named static message).
func TestNamedPolicyMessages(t *testing.T) {
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		Validations: []admissionregistrationv1.Validation{
			{Expression: "a", Message: "  padded  "},
			{Expression: "  object.spec.x > 0  "},
			{Expression: "c", Message: "already (shepherd R)"},
			{Expression: "  blank  ", Message: "   "},
			{Expression: "d", Message: "m", MessageExpression: "object.msg"},
		},
	}}
	namedPolicy("R", vap)
	var messages []string
	for _, v := range vap.Spec.Validations {
		messages = append(messages, v.Message)
	}
	want := []string{"padded (shepherd R)", "failed expression: object.spec.x > 0 (shepherd R)", "already (shepherd R)",
		"failed expression: blank (shepherd R)", "m (shepherd R)"}
	if diff := cmp.Diff(want, messages); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	for i := range 4 {
		if vap.Spec.Validations[i].MessageExpression != "" {
			t.Errorf("validation %d without a messageExpression got %q", i, vap.Spec.Validations[i].MessageExpression)
		}
	}
	// The apiserver's environment (its string library has trim; the test
	// kit's plain CEL has not).
	env, err := baseEnv.Env(environment.NewExpressions)
	if err != nil {
		t.Fatal(err)
	}
	if env, err = env.Extend(cel.Variable("object", cel.DynType)); err != nil {
		t.Fatal(err)
	}
	expr := vap.Spec.Validations[4].MessageExpression
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	for msg, want := range map[string]string{
		"too many nodes":  "too many nodes (shepherd R)",
		"  spaced out \n": "spaced out (shepherd R)",
		"   ":             "",
		"":                "",
	} {
		got, _, err := prg.Eval(map[string]any{"object": map[string]any{"msg": msg}})
		if err != nil {
			t.Fatalf("messageExpression on %q: %v", msg, err)
		}
		if got != types.String(want) {
			t.Errorf("messageExpression on %q = %v, want %q", msg, got, want)
		}
	}
}

func TestWithAudit(t *testing.T) {
	deny := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	got := WithAudit(deny)
	if diff := cmp.Diff([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny, admissionregistrationv1.Audit}, got); diff != "" {
		t.Errorf("Deny (-want +got):\n%s", diff)
	}
	if len(deny) != 1 {
		t.Errorf("the given actions changed: %v", deny)
	}
	// Appending must not write into the caller's spare capacity.
	spare := make([]admissionregistrationv1.ValidationAction, 1, 4)
	spare[0] = admissionregistrationv1.Warn
	out := WithAudit(spare)
	out[0] = admissionregistrationv1.Deny
	if spare[0] != admissionregistrationv1.Warn || spare[:2][1] != "" {
		t.Errorf("WithAudit shares the caller's array: %v", spare[:2])
	}
	already := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
	if diff := cmp.Diff(already, WithAudit(already)); diff != "" {
		t.Errorf("Warn+Audit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}, WithAudit(nil)); diff != "" {
		t.Errorf("none (-want +got):\n%s", diff)
	}
}

// A rule exports as a policy of the apiserver's shape: shepherd's labels
// (the rule's only when it fits a label value), its failurePolicy, the
// binding's action, selectors that are never nil, Equivalent matching,
// shepherd's UPDATE condition after the rule's own, and a binding leaving
// out the namespaces given.
func TestExportRuleShape(t *testing.T) {
	long := strings.Repeat("p", 64) // one more than a label value holds
	for _, tc := range []struct {
		name          string
		mutate        func(*Rule)
		exclude       []string
		wantLabel     bool
		wantFail      admissionregistrationv1.FailurePolicyType
		wantActions   []admissionregistrationv1.ValidationAction
		wantExcluded  []string
		wantCondNames []string
	}{
		{"defaults", func(*Rule) {}, nil, true, admissionregistrationv1.Fail,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, []string{"kube-system", "shepherd-system"}, []string{UpdateConditionName}},
		{"Warn, Ignore, own namespace", func(r *Rule) {
			r.Action, r.FailurePolicy = shepherdv1alpha1.ActionWarn, shepherdv1alpha1.FailurePolicyIgnore
		}, []string{"platform"}, true, admissionregistrationv1.Ignore,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}, []string{"kube-system", "platform"}, []string{UpdateConditionName}},
		{"Audit, an empty namespace is the default", func(r *Rule) { r.Action = shepherdv1alpha1.ActionAudit }, []string{""}, true, admissionregistrationv1.Fail,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}, []string{"kube-system", "shepherd-system"}, []string{UpdateConditionName}},
		{"a name too long for a label value", func(r *Rule) { r.ID = long }, nil, false, admissionregistrationv1.Fail,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, []string{"kube-system", "shepherd-system"}, []string{UpdateConditionName}},
		{"the rule's conditions first", func(r *Rule) {
			r.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "mine", Expression: "true"}}
		}, nil, true, admissionregistrationv1.Fail,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, []string{"kube-system", "shepherd-system"}, []string{"mine", UpdateConditionName}},
		{"a rule that reads the user has no UPDATE condition", func(r *Rule) {
			r.Validations[0].Expression = "request.userInfo.username != 'x' && object.spec.x > 0"
		}, nil, true, admissionregistrationv1.Fail,
			[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, []string{"kube-system", "shepherd-system"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := trainJobRule("max-day", shepherdv1alpha1.Validation{Expression: "object.spec.x > 0", Message: "m"})
			tc.mutate(&r)
			vap, b := exportRule(r, readsOfRule(&r), SourcePolicy, nil, tc.exclude...)
			if vap.Name != PolicyName(r.ID, SourcePolicy) || b.Name != vap.Name || b.Spec.PolicyName != vap.Name {
				t.Errorf("names: policy %s, binding %s naming %s", vap.Name, b.Name, b.Spec.PolicyName)
			}
			for _, labels := range []map[string]string{vap.Labels, b.Labels} {
				if labels["app.kubernetes.io/managed-by"] != "shepherd" {
					t.Errorf("labels %v lack managed-by shepherd", labels)
				}
				if got, ok := labels[LabelRule]; ok != tc.wantLabel || (ok && got != r.ID) {
					t.Errorf("rule label %q (present %v), want present=%v", got, ok, tc.wantLabel)
				}
			}
			if *vap.Spec.FailurePolicy != tc.wantFail {
				t.Errorf("failurePolicy %s, want %s", *vap.Spec.FailurePolicy, tc.wantFail)
			}
			if diff := cmp.Diff(tc.wantActions, b.Spec.ValidationActions); diff != "" {
				t.Errorf("validationActions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantExcluded, b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values); diff != "" {
				t.Errorf("excluded namespaces (-want +got):\n%s", diff)
			}
			mc := vap.Spec.MatchConstraints
			if mc.NamespaceSelector == nil || mc.ObjectSelector == nil || *mc.MatchPolicy != admissionregistrationv1.Equivalent ||
				*b.Spec.MatchResources.MatchPolicy != admissionregistrationv1.Equivalent {
				t.Errorf("matchConstraints %+v: want non-nil selectors and Equivalent matching", mc)
			}
			var names []string
			for _, c := range vap.Spec.MatchConditions {
				names = append(names, c.Name)
			}
			if diff := cmp.Diff(tc.wantCondNames, names); diff != "" {
				t.Errorf("matchConditions (-want +got):\n%s", diff)
			}
		})
	}
}

// A resource rule exports with the operations it names (CREATE and UPDATE
// when none), each kind's plural resource, and the kinds' served versions
// when every one is known; a wildcard, a resource named directly or a kind
// without a schema exports with every version.
func TestExportResourceRule(t *testing.T) {
	s := seedSchemas(t)
	tjVersions := s.Versions(schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"})
	if len(tjVersions) == 0 {
		t.Fatal("the seed schemas serve no TrainJob version")
	}
	for _, tc := range []struct {
		name          string
		rr            shepherdv1alpha1.ResourceRule
		schemas       *Schemas
		wantOps       []admissionregistrationv1.OperationType
		wantResources []string
		wantVersions  []string
	}{
		{"kinds with schemas", shepherdv1alpha1.ResourceRule{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob", "TrainJob"}, Operations: []string{"UPDATE"}}, s,
			[]admissionregistrationv1.OperationType{"UPDATE"}, []string{"trainjobs"}, tjVersions},
		{"no schemas", shepherdv1alpha1.ResourceRule{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}}, nil,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"trainjobs"}, []string{"*"}},
		{"a wildcard kind", shepherdv1alpha1.ResourceRule{APIGroups: []string{"grove.io"}, Kinds: []string{"*"}}, s,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"*"}, []string{"*"}},
		{"a resource named directly", shepherdv1alpha1.ResourceRule{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}, Resources: []string{"trainjobs/status"}}, s,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"trainjobs", "trainjobs/status"}, []string{"*"}},
		{"a kind outside the webhook's, from the schemas", shepherdv1alpha1.ResourceRule{APIGroups: []string{"shepherd.dev"}, Kinds: []string{"WorkloadPolicy"}}, s,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"workloadpolicies"},
			s.Versions(schema.GroupKind{Group: "shepherd.dev", Kind: "WorkloadPolicy"})},
		{"a kind without a schema, by convention", shepherdv1alpha1.ResourceRule{APIGroups: []string{"example.com"}, Kinds: []string{"Widget"}}, s,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"widgets"}, []string{"*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exportResourceRule(tc.rr, tc.schemas)
			if diff := cmp.Diff(tc.wantOps, got.Operations); diff != "" {
				t.Errorf("operations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantResources, got.Resources); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantVersions, got.APIVersions); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.rr.APIGroups, got.APIGroups); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if got.Scope == nil || *got.Scope != admissionregistrationv1.AllScopes {
				t.Errorf("scope %v, want *", got.Scope)
			}
		})
	}
}
