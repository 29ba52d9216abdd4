package celrules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// fieldError is what an error tells its reader: where, what kind, and (in
// part) why.
type fieldError struct {
	Field  string
	Type   field.ErrorType
	Detail string // a part of the error's detail
}

// shapeRule is a rule that passes validateShape, for the cases to break.
func shapeRule() Rule {
	return trainJobRule("r", shepherdv1alpha1.Validation{Expression: "true"})
}

// Each part of a rule the compiler does not see is checked, with an error
// naming the field, its type, and what would work.
func TestShapeErrorsNameTheFieldAndTheFix(t *testing.T) {
	reason := func(r metav1.StatusReason) *metav1.StatusReason { return &r }
	tooMany := make([]shepherdv1alpha1.MatchCondition, maxMatchConditions)
	for i := range tooMany {
		tooMany[i] = shepherdv1alpha1.MatchCondition{Name: fmt.Sprint("c", i), Expression: "true"}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Rule)
		want   []fieldError
	}{
		{"no name", func(r *Rule) { r.ID = "" },
			[]fieldError{{"metadata.name", field.ErrorTypeRequired, "a rule needs a name"}}},
		{"unknown action", func(r *Rule) { r.Action = "Block" },
			[]fieldError{{"spec.action", field.ErrorTypeNotSupported, `"Deny", "Warn", "Audit"`}}},
		{"unknown failurePolicy", func(r *Rule) { r.FailurePolicy = "Retry" },
			[]fieldError{{"spec.failurePolicy", field.ErrorTypeNotSupported, `"Fail", "Ignore"`}}},
		{"one matchCondition too many", func(r *Rule) { r.MatchConditions = tooMany },
			[]fieldError{{"spec.matchConditions", field.ErrorTypeTooMany, "must have at most 63 items"}}},
		{"the reserved matchCondition name", func(r *Rule) {
			r.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "mine", Expression: "true"}, {Name: UpdateConditionName, Expression: "true"}}
		}, []fieldError{{"spec.matchConditions[1].name", field.ErrorTypeInvalid, "reserved: shepherd adds the condition of this name itself"}}},
		{"the reserved variable name", func(r *Rule) {
			r.Variables = []shepherdv1alpha1.Variable{{Name: ExemptVariable, Expression: "true"}}
		}, []fieldError{{"spec.variables[0].name", field.ErrorTypeInvalid, "an exported policy exempts the objects of a PolicyException"}}},
		{"no resources", func(r *Rule) { r.Match.Resources = nil },
			[]fieldError{{"spec.match.resources", field.ErrorTypeRequired, "list the kinds or resources"}}},
		{"no apiGroups", func(r *Rule) { r.Match.Resources[0].APIGroups = nil },
			[]fieldError{{"spec.match.resources[0].apiGroups", field.ErrorTypeRequired, "e.g. trainer.kubeflow.org"}}},
		{"neither kinds nor resources", func(r *Rule) { r.Match.Resources[0].Kinds = nil },
			[]fieldError{{"spec.match.resources[0].kinds", field.ErrorTypeRequired, "name kinds and/or resources"}}},
		{"an operation the apiserver does not know", func(r *Rule) { r.Match.Resources[0].Operations = []string{"CREATE", "PATCH"} },
			[]fieldError{{"spec.match.resources[0].operations[1]", field.ErrorTypeNotSupported, `"*", "CONNECT", "CREATE", "DELETE", "UPDATE"`}}},
		{"a namespaceSelector that does not parse", func(r *Rule) {
			r.Match.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near"}}}
		}, []fieldError{{"spec.match.namespaceSelector", field.ErrorTypeInvalid, `"Near" is not a valid label selector operator`}}},
		{"an objectSelector that does not parse", func(r *Rule) {
			r.Match.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn}}}
		}, []fieldError{{"spec.match.objectSelector", field.ErrorTypeInvalid, "for 'in', 'notin' operators, values set can't be empty"}}},
		{"no validations", func(r *Rule) { r.Validations = nil },
			[]fieldError{{"spec.validations", field.ErrorTypeRequired, "at least one validation"}}},
		{"a variable twice", func(r *Rule) {
			r.Variables = []shepherdv1alpha1.Variable{{Name: "n", Expression: "1"}, {Name: "m", Expression: "2"}, {Name: "n", Expression: "3"}}
		}, []fieldError{{"spec.variables[2].name", field.ErrorTypeDuplicate, ""}}},
		{"an unknown reason", func(r *Rule) { r.Validations[0].Reason = reason("Teapot") },
			[]fieldError{{"spec.validations[0].reason", field.ErrorTypeNotSupported, `"Invalid", "Forbidden", "Unauthorized", "RequestEntityTooLarge"`}}},
		{"every error at once", func(r *Rule) {
			r.ID, r.Action, r.FailurePolicy, r.Validations = "", "Block", "Retry", nil
		}, []fieldError{
			{"metadata.name", field.ErrorTypeRequired, ""},
			{"spec.action", field.ErrorTypeNotSupported, ""},
			{"spec.failurePolicy", field.ErrorTypeNotSupported, ""},
			{"spec.validations", field.ErrorTypeRequired, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shapeRule()
			tc.mutate(&r)
			errs := validateShape(r, field.NewPath("spec"))
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if errs[i].Field != w.Field || errs[i].Type != w.Type || !strings.Contains(errs[i].Error(), w.Detail) {
					t.Errorf("error %d: %q (%s on %s), want %s on %s saying %q", i, errs[i].Error(), errs[i].Type, errs[i].Field, w.Type, w.Field, w.Detail)
				}
			}
		})
	}
	for _, ok := range []metav1.StatusReason{metav1.StatusReasonInvalid, metav1.StatusReasonForbidden, metav1.StatusReasonUnauthorized, metav1.StatusReasonRequestEntityTooLarge} {
		r := shapeRule()
		r.Validations[0].Reason = reason(ok)
		if errs := validateShape(r, field.NewPath("spec")); len(errs) != 0 {
			t.Errorf("reason %s refused: %v", ok, errs)
		}
	}
	r := shapeRule()
	r.MatchConditions = tooMany[:maxMatchConditions-1]
	if errs := validateShape(r, field.NewPath("spec")); len(errs) != 0 {
		t.Errorf("%d matchConditions (the most, with shepherd's own) refused: %v", len(r.MatchConditions), errs)
	}
}

// A fieldPath is dotted names with list indexes or quoted map keys; the
// error for anything else shows the two forms that work.
func TestFieldPathSyntax(t *testing.T) {
	for path, ok := range map[string]bool{
		"spec":                                   true,
		".spec.trainer":                          true,
		"spec.replicatedJobs[0].template":        true,
		"metadata.labels['app']":                 true,
		"metadata.annotations['shepherd.dev/x']": true,
		"spec.$ref_x-y":                          true,
		"spec..trainer":                          false,
		"spec.trainer.":                          false,
		"spec[x]":                                false,
		"spec['a\\'b']":                          false,
		`metadata.labels['a\b']`:                 false,
		"spec[-1]":                               false,
		"0spec":                                  false,
		"spec trainer":                           false,
		`metadata.labels["app"]`:                 false,
	} {
		r := shapeRule()
		r.Validations[0].FieldPath = path
		errs := validateShape(r, field.NewPath("spec"))
		if ok && len(errs) != 0 {
			t.Errorf("%q refused: %v", path, errs)
		}
		if !ok && (len(errs) != 1 || errs[0].Field != "spec.validations[0].fieldPath" ||
			!strings.Contains(errs[0].Detail, "spec.replicatedJobs[0].template or metadata.labels['app']")) {
			t.Errorf("%q: errors %v, want one on spec.validations[0].fieldPath showing the forms", path, errs)
		}
	}
}

// A rule outside the webhook's scope is refused with the values that
// would work: only the groups, kinds and resources the webhook is sent,
// narrowed to the groups the rule names, and a kind named with two groups
// must be in both.
func TestScopeErrorsListWhatWouldWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		rr   shepherdv1alpha1.ResourceRule
		want []fieldError
	}{
		{"a group the webhook is not sent, its kinds not judged",
			shepherdv1alpha1.ResourceRule{APIGroups: []string{"batch"}, Kinds: []string{"Job"}},
			[]fieldError{{"spec.match.resources[0].apiGroups[0]", field.ErrorTypeNotSupported, `"trainer.kubeflow.org", "jobset.x-k8s.io", "grove.io"`}}},
		{"a kind of another group lists the group's kinds",
			shepherdv1alpha1.ResourceRule{APIGroups: []string{"grove.io"}, Kinds: []string{"TrainJob"}},
			[]fieldError{{"spec.match.resources[0].kinds[0]", field.ErrorTypeNotSupported, `"PodCliqueSet", "PodClique", "PodCliqueScalingGroup"`}}},
		{"a resource of another group lists the group's resources",
			shepherdv1alpha1.ResourceRule{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"trainjobs"}},
			[]fieldError{{"spec.match.resources[0].resources[0]", field.ErrorTypeNotSupported, `supported values: "jobsets"`}}},
		{"a kind in one of two groups",
			shepherdv1alpha1.ResourceRule{APIGroups: []string{"trainer.kubeflow.org", "grove.io"}, Kinds: []string{"TrainJob"}},
			[]fieldError{{"spec.match.resources[0].kinds[0]", field.ErrorTypeNotSupported, `"TrainJob"`}}},
		{"DELETE names the way out",
			shepherdv1alpha1.ResourceRule{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}, Operations: []string{"UPDATE", "DELETE"}},
			[]fieldError{{"spec.match.resources[0].operations[1]", field.ErrorTypeInvalid, "write a ValidatingAdmissionPolicy directly for DELETE"}}},
		{"in scope", shepherdv1alpha1.ResourceRule{APIGroups: []string{"grove.io"}, Kinds: []string{"PodClique"}, Resources: []string{"podcliquesets"}, Operations: []string{"CREATE"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shapeRule()
			r.Match.Resources = []shepherdv1alpha1.ResourceRule{tc.rr}
			errs := scopeErrors(r, field.NewPath("spec"))
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if errs[i].Field != w.Field || errs[i].Type != w.Type || !strings.Contains(errs[i].Error(), w.Detail) {
					t.Errorf("error %d: %q (%s on %s), want %s on %s saying %q", i, errs[i].Error(), errs[i].Type, errs[i].Field, w.Type, w.Field, w.Detail)
				}
			}
		})
	}
}

// The shape is checked before anything is compiled: a rule with a shape
// error reports only those, not the compile errors of its expressions too.
func TestShapeErrorsComeBeforeCompileErrors(t *testing.T) {
	r := shapeRule()
	r.ID = ""
	r.Validations[0].Expression = "object.spec.nope("
	_, errs := compileRule(r, SourcePolicy, environment.NewExpressions, nil)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	if diff := cmp.Diff([]string{"metadata.name"}, fields); diff != "" {
		t.Errorf("error fields (-want +got):\n%s", diff)
	}
}

// Every compile error of a rule is reported at once, each on the field
// path of its expression, with the compiler's message and the expression.
func TestCompileErrorsAreReportedTogetherWithTheirPaths(t *testing.T) {
	r := shapeRule()
	r.Variables = []shepherdv1alpha1.Variable{{Name: "ok", Expression: "1"}, {Name: "bad", Expression: "1 +"}}
	r.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "a", Expression: "true"}, {Name: "b", Expression: "'not a bool'"}}
	r.Validations = []shepherdv1alpha1.Validation{
		{Expression: "true"},
		{Expression: "object.spec.x(", MessageExpression: "42"},
	}
	_, errs := compileRule(r, SourcePolicy, environment.NewExpressions, nil)
	var got []fieldError
	for _, e := range errs {
		got = append(got, fieldError{Field: e.Field, Type: e.Type})
	}
	want := []fieldError{
		{Field: "spec.variables[1].expression", Type: field.ErrorTypeInvalid},
		{Field: "spec.matchConditions[1].expression", Type: field.ErrorTypeInvalid},
		{Field: "spec.validations[1].expression", Type: field.ErrorTypeInvalid},
		{Field: "spec.validations[1].messageExpression", Type: field.ErrorTypeInvalid},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("errors (-want +got):\n%s\n%v", diff, errs)
	}
	for i, bad := range []string{"1 +", "'not a bool'", "object.spec.x(", "42"} {
		if errs[i].BadValue != bad {
			t.Errorf("error on %s shows %v, want the expression %q", errs[i].Field, errs[i].BadValue, bad)
		}
		if d := errs[i].Detail; d == "" || d != strings.TrimSpace(d) {
			t.Errorf("error on %s: detail %q, want the compiler's message, trimmed", errs[i].Field, d)
		}
	}
	for i, want := range map[int]string{1: "must evaluate to bool", 3: "must evaluate to string"} {
		if !strings.Contains(errs[i].Detail, want) {
			t.Errorf("error on %s: %q, want it to say %q", errs[i].Field, errs[i].Detail, want)
		}
	}
}

// Only a rule that names namespaceObject somewhere has the request's
// Namespace looked up for it.
func TestMentionsNamespaceObject(t *testing.T) {
	const ns = "namespaceObject.metadata.name == 'x'"
	for _, tc := range []struct {
		name   string
		mutate func(*Rule)
		want   bool
	}{
		{"nowhere", func(*Rule) {}, false},
		{"a validation", func(r *Rule) { r.Validations[0].Expression = ns }, true},
		{"a messageExpression", func(r *Rule) { r.Validations[0].MessageExpression = "namespaceObject.metadata.name" }, true},
		{"a variable", func(r *Rule) { r.Variables = []shepherdv1alpha1.Variable{{Name: "v", Expression: ns}} }, true},
		{"a matchCondition", func(r *Rule) { r.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: "c", Expression: ns}} }, true},
		{"a fieldPathsExpression", func(r *Rule) {
			r.Validations[0].FieldPathsExpression = "[namespaceObject.metadata.name]"
		}, true},
		{"the object's namespace only", func(r *Rule) { r.Validations[0].Expression = "object.metadata.namespace == 'x'" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shapeRule()
			tc.mutate(&r)
			vap, _ := exportRule(r, readsOfRule(&r), SourcePolicy, nil)
			if got := mentionsNamespaceObject(vap, r); got != tc.want {
				t.Errorf("mentionsNamespaceObject = %v, want %v", got, tc.want)
			}
		})
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "namespaceObject.metadata.name"}},
	}}
	if !mentionsNamespaceObject(vap, Rule{}) {
		t.Error("an audit annotation naming namespaceObject is not seen")
	}
}
