package celrules

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// fieldResult is what a result says about where and why, for comparing.
type fieldResult struct {
	Field, Reason string
	EvalError     bool
}

func fieldResults(res []Result) []fieldResult {
	var out []fieldResult
	for _, r := range res {
		out = append(out, fieldResult{Field: r.Field, Reason: r.Reason, EvalError: r.EvalError})
	}
	return out
}

// A failed validation names the fields its fieldPathsExpression gives, one
// result each; when that expression gives nothing usable (an empty list,
// only empty strings, an error) the static fieldPath stands, without its
// leading dot. The verdict never depends on the expression.
func TestFieldPathsOfAFailedValidation(t *testing.T) {
	spec := map[string]any{"runtimeRef": map[string]any{"name": "torch"},
		"trainer": map[string]any{"numNodes": int64(2), "args": []any{"--lr", "--bad", "--worse"}}}
	e := policyEngine(t)
	for _, tc := range []struct {
		name       string
		expression string
		fieldPath  string
		paths      string
		reason     *metav1.StatusReason
		want       []fieldResult
	}{
		{name: "static fieldPath", expression: "false", fieldPath: "spec.trainer.numNodes",
			want: []fieldResult{{Field: "spec.trainer.numNodes", Reason: reasonInvalid}}},
		{name: "static fieldPath with a leading dot", expression: "false", fieldPath: ".spec.trainer",
			want: []fieldResult{{Field: "spec.trainer", Reason: reasonInvalid}}},
		{name: "no field at all", expression: "false",
			want: []fieldResult{{Field: "", Reason: reasonInvalid}}},
		{name: "one result per path the expression gives", expression: "false", fieldPath: "spec.trainer",
			paths: "object.spec.trainer.args.filter(a, a.startsWith('--b') || a.startsWith('--w')).map(a, 'spec.trainer.args[' + a + ']')",
			want:  []fieldResult{{Field: "spec.trainer.args[--bad]", Reason: reasonInvalid}, {Field: "spec.trainer.args[--worse]", Reason: reasonInvalid}}},
		{name: "an empty list leaves the static path", expression: "false", fieldPath: "spec.trainer",
			paths: "object.spec.trainer.args.filter(a, a == 'none').map(a, 'spec.trainer.args')",
			want:  []fieldResult{{Field: "spec.trainer", Reason: reasonInvalid}}},
		{name: "empty strings are no paths", expression: "false", fieldPath: "spec.trainer",
			paths: "['', '']",
			want:  []fieldResult{{Field: "spec.trainer", Reason: reasonInvalid}}},
		{name: "empty strings among paths are dropped", expression: "false",
			paths: "['', 'spec.runtimeRef']",
			want:  []fieldResult{{Field: "spec.runtimeRef", Reason: reasonInvalid}}},
		{name: "an error in the expression leaves the static path", expression: "false", fieldPath: "spec.trainer.numNodes",
			paths: "[string(object.spec.trainer.numNodes / 0)]",
			want:  []fieldResult{{Field: "spec.trainer.numNodes", Reason: reasonInvalid}}},
		{name: "a passing validation names nothing", expression: "true", fieldPath: "spec.trainer",
			paths: "['spec.trainer.args']"},
		{name: "reason Forbidden", expression: "false", fieldPath: "spec.trainer", reason: ptrReason(metav1.StatusReasonForbidden),
			want: []fieldResult{{Field: "spec.trainer", Reason: reasonForbidden}}},
		{name: "reason Unauthorized is reported as invalid", expression: "false", fieldPath: "spec.trainer", reason: ptrReason(metav1.StatusReasonUnauthorized),
			want: []fieldResult{{Field: "spec.trainer", Reason: reasonInvalid}}},
		{name: "an evaluation error names the static path", expression: "object.spec.trainer.numNodes / 0 > 1", fieldPath: ".spec.trainer.numNodes",
			paths: "['spec.elsewhere']",
			want:  []fieldResult{{Field: "spec.trainer.numNodes", Reason: reasonInvalid, EvalError: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One engine, the policy replaced per case: compiling the
			// built-ins once keeps the table fast.
			if errs := e.SetPolicy(policy("p", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
				s.Validations[0].FieldPath = tc.fieldPath
				s.Validations[0].FieldPathsExpression = tc.paths
				s.Validations[0].Reason = tc.reason
			}, tc.expression)); len(errs) > 0 {
				t.Fatal(errs)
			}
			res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, spec), nil))
			if diff := cmp.Diff(tc.want, fieldResults(res)); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			for _, r := range res {
				if !r.EvalError && r.Message != "p failed (shepherd p)" {
					t.Errorf("message %q, want the validation's, naming the rule", r.Message)
				}
			}
		})
	}
}

func ptrReason(r metav1.StatusReason) *metav1.StatusReason { return &r }

// A validation's results come in validation order, each with its own
// paths: the first, failing with two paths its expression gives, then the
// second with its static path.
func TestFieldPathsPerValidation(t *testing.T) {
	e := policyEngine(t, policy("p", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Validations[0].FieldPath = "spec.runtimeRef"
		s.Validations[0].FieldPathsExpression = "['spec.trainer', 'metadata.labels']"
		s.Validations[1].FieldPath = "metadata.name"
		s.Validations[1].Message = "second"
	}, "false", "false"))
	res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, nil), nil))
	var got []string
	for _, r := range res {
		got = append(got, r.Field+": "+r.Message)
	}
	want := []string{"spec.trainer: p failed (shepherd p)", "metadata.labels: p failed (shepherd p)", "metadata.name: second (shepherd p)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

// A fieldPathsExpression is compiled and type-checked with the rule: one
// that does not parse, gives something other than a list of strings, or
// reads a field the schema lacks is a load error on its own field path.
func TestFieldPathsExpressionCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, paths, detail string
		schemas             bool
	}{
		{"does not parse", "['spec'", "Syntax error", false},
		{"not a list", "'spec.trainer'", "must evaluate to list(string)", false},
		{"a list of ints", "[1, 2]", "must evaluate to list(string)", false},
		{"a misspelled field", "object.spec.trainr.args.map(a, 'spec.trainer.args')", "undefined field 'trainr'", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *Schemas
			if tc.schemas {
				s = seedSchemas(t)
			}
			r := trainJobRule("r", shepherdv1alpha1.Validation{Expression: "true", FieldPathsExpression: tc.paths})
			_, errs := compileRule(r, SourcePolicy, environment.NewExpressions, s)
			if len(errs) != 1 {
				t.Fatalf("errors %v, want one", errs)
			}
			if errs[0].Field != "spec.validations[0].fieldPathsExpression" || !strings.Contains(errs[0].Detail, tc.detail) {
				t.Errorf("error %q on %s, want one saying %q on spec.validations[0].fieldPathsExpression", errs[0].Detail, errs[0].Field, tc.detail)
			}
			if errs[0].BadValue != tc.paths {
				t.Errorf("bad value %v, want the expression", errs[0].BadValue)
			}
		})
	}
}
