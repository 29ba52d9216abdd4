package offline

import (
	"context"
	"fmt"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// CheckViolation is one violation in `shepherd check` output.
type CheckViolation struct {
	Rule    string `json:"rule"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  string `json:"action"`
	// FirstBy says which layer in front of shepherd answers first on a
	// cluster serving the CRDs check judged against (celrules.RuleInfo.
	// EnforcedUpstream): there `shepherd serve` leaves the rule to it.
	FirstBy string `json:"firstBy,omitempty"`
	// Exception is the PolicyException that exempts the violation (action
	// Exempt), and ExceptionExpires when it stops.
	Exception        string     `json:"exception,omitempty"`
	ExceptionExpires *time.Time `json:"exceptionExpires,omitempty"`
}

// CheckResult is the verdict on one object in `shepherd check` output.
type CheckResult struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Namespace  string                         `json:"namespace"`
	Name       string                         `json:"name"`
	Operation  string                         `json:"operation"`
	Allowed    bool                           `json:"allowed"`
	Violations []CheckViolation               `json:"violations"`
	Warnings   []string                       `json:"warnings"`
	Patch      []jsonpatch.JsonPatchOperation `json:"patch"`
	Object     map[string]any                 `json:"object"`
}

// CheckInput is what Check judges.
type CheckInput struct {
	Chain   *webhook.Chain
	Schemas *celrules.Schemas
	// Operation is CREATE, UPDATE or DELETE.
	Operation string
	Objects   []Manifest
	// Olds are the stored objects of an UPDATE or DELETE, each paired with
	// the object of the same identity (MatchOld).
	Olds []Manifest
	// FieldValidation is Strict or Warn, as kubectl's --validate.
	FieldValidation string
	// Timeout bounds the admission of one object.
	Timeout time.Duration
	// KeepObjects keeps each admitted object in its result (the text
	// output does not print them: keeping them would hold a second copy
	// of the input).
	KeepObjects bool
}

// Check admits every object as the apiserver would with shepherd's chain
// in front of it (Admit) and reports each verdict, naming the layer that
// answers first on a cluster for a rule an upstream layer enforces. An
// error — an old object that is not the same object, an admission over
// the timeout — names the file and line; nothing is judged after it.
// The objects' slots are cleared as they are judged, so what was read can
// be freed while the rest are.
func Check(ctx context.Context, in CheckInput) ([]CheckResult, error) {
	// Pair every object with its stored version first: a wrong old object
	// is found before anything is judged.
	for _, m := range in.Objects {
		DefaultNamespace(in.Schemas, m.Obj)
	}
	for _, m := range in.Olds {
		DefaultNamespace(in.Schemas, m.Obj)
	}
	pairs := make([]*unstructured.Unstructured, len(in.Objects))
	if len(in.Olds) > 0 {
		for i, m := range in.Objects {
			var err error
			if pairs[i], err = MatchOld(m, in.Olds, len(in.Objects)); err != nil {
				return nil, err
			}
		}
	}
	upstream := map[string]string{}
	for _, r := range in.Chain.Rules() {
		if r.EnforcedUpstream != "" {
			upstream[r.ID] = r.EnforcedUpstream
		}
	}
	results := make([]CheckResult, 0, len(in.Objects))
	for i, m := range in.Objects {
		old := pairs[i]
		v, err := Admit(ctx, in.Chain, in.Schemas, in.Operation, m.Obj, old, in.FieldValidation, in.Timeout)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", m, m.Obj.GetKind(), NamespacedName(m.Obj), err)
		}
		subject := m.Obj
		if in.Operation == "DELETE" && old != nil {
			subject = old
		}
		r := CheckResult{
			APIVersion: subject.GetAPIVersion(),
			Kind:       subject.GetKind(),
			Namespace:  subject.GetNamespace(),
			Name:       subject.GetName(),
			Operation:  in.Operation,
			Allowed:    v.Allowed,
			Violations: []CheckViolation{},
			Warnings:   append([]string{}, v.Warnings...),
			Patch:      append([]jsonpatch.JsonPatchOperation{}, v.Patch...),
		}
		if in.KeepObjects {
			r.Object = v.Object
		}
		for _, viol := range v.Violations {
			r.Violations = append(r.Violations, CheckViolation{Rule: viol.Rule, Field: viol.Field, Message: viol.Message, Action: string(viol.Action), FirstBy: upstream[viol.Rule]})
		}
		for _, e := range v.Exempted {
			r.Violations = append(r.Violations, CheckViolation{Rule: e.Rule, Field: e.Field, Message: e.Message, Action: string(webhook.ActionExempt), Exception: e.Exception, ExceptionExpires: e.Expires})
		}
		results = append(results, r)
		in.Objects[i], pairs[i] = Manifest{}, nil
	}
	return results, nil
}
