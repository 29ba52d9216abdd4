package celrules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	apiservercel "k8s.io/apiserver/pkg/cel"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// RequestBudget is the CEL cost budget of one admission request across every
// rule, the apiserver's per-policy runtime budget; each single expression is
// further capped at celconfig.PerCallLimit by the environment.
const RequestBudget = celconfig.RuntimeCELCostBudget

const (
	reasonInvalid   = string(field.ErrorTypeInvalid)
	reasonForbidden = string(field.ErrorTypeForbidden)
)

// request is the evaluation input shared by every rule of one admission.
type request struct {
	in        *Input
	attrs     *admission.VersionedAttributes
	admission *admissionv1.AdmissionRequest
	objLabels labels.Set
	oldLabels labels.Set
	nsLabels  labels.Set
}

func newRequest(in *Input) *request {
	gvk := schema.GroupVersionKind{Group: in.Group, Version: in.Version, Kind: in.Kind}
	gvr := schema.GroupVersionResource{Group: in.Group, Version: in.Version, Resource: in.Resource}
	// A nil map must become an untyped nil runtime.Object: the activation
	// turns a nil object into CEL null (DELETE has no object, CREATE no
	// oldObject).
	var obj, old runtime.Object
	r := &request{in: in}
	if in.Object != nil {
		u := &unstructured.Unstructured{Object: in.Object}
		obj = u
		r.objLabels = u.GetLabels()
	}
	if in.OldObject != nil {
		u := &unstructured.Unstructured{Object: in.OldObject}
		old = u
		r.oldLabels = u.GetLabels()
	}
	if in.NamespaceObject != nil {
		r.nsLabels = in.NamespaceObject.Labels
	}
	ui := &user.DefaultInfo{Name: in.UserInfo.Username, UID: in.UserInfo.UID, Groups: in.UserInfo.Groups}
	if len(in.UserInfo.Extra) > 0 {
		ui.Extra = map[string][]string{}
		for k, v := range in.UserInfo.Extra {
			ui.Extra[k] = v
		}
	}
	attrs := admission.NewAttributesRecord(obj, old, gvk, in.Namespace, in.Name, gvr, "", admission.Operation(in.Operation), nil, in.DryRun, ui)
	r.attrs = &admission.VersionedAttributes{
		Attributes:         attrs,
		VersionedObject:    admission.NewLazyObject(obj),
		VersionedOldObject: admission.NewLazyObject(old),
		VersionedKind:      gvk,
	}
	r.admission = plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
	r.admission.UID = types.UID(in.UID)
	return r
}

// matches applies a rule's match block: resources, operations and the
// namespace and object selectors, with ValidatingAdmissionPolicy semantics.
func (cr *compiledRule) matches(r *request) bool {
	in := r.in
	resourceMatch := false
	for _, rr := range cr.rule.Match.Resources {
		if matchResourceRule(rr, in) {
			resourceMatch = true
			break
		}
	}
	if !resourceMatch {
		return false
	}
	// A cluster-scoped object always matches a namespaceSelector, except a
	// Namespace, which is matched on its own labels.
	if in.Namespace != "" || (in.Group == "" && in.Kind == "Namespace") {
		nsLabels := r.nsLabels
		if in.Namespace == "" {
			nsLabels = r.objLabels
		}
		if !cr.namespaceSelector.Matches(nsLabels) {
			return false
		}
	}
	if !cr.objectSelector.Empty() {
		if !cr.objectSelector.Matches(r.objLabels) && !cr.objectSelector.Matches(r.oldLabels) {
			return false
		}
	}
	return true
}

func matchResourceRule(rr shepherdv1alpha1.ResourceRule, in *Input) bool {
	ops := rr.Operations
	if len(ops) == 0 {
		ops = []string{"CREATE", "UPDATE"}
	}
	if !slices.Contains(ops, "*") && !slices.Contains(ops, in.Operation) {
		return false
	}
	if !slices.Contains(rr.APIGroups, "*") && !slices.Contains(rr.APIGroups, in.Group) {
		return false
	}
	return slices.Contains(rr.Kinds, "*") || slices.Contains(rr.Kinds, in.Kind) ||
		slices.Contains(rr.Resources, "*") || slices.Contains(rr.Resources, in.Resource)
}

func evaluate(ctx context.Context, rules []*compiledRule, in *Input) []Result {
	r := newRequest(in)
	budget := int64(RequestBudget)
	var out []Result
	for _, cr := range rules {
		if !cr.matches(r) {
			continue
		}
		var res []Result
		res, budget = cr.evaluate(ctx, r, budget)
		out = append(out, res...)
	}
	return out
}

// evalError is the result of a rule that could not be evaluated: a Deny
// naming the rule, or with failurePolicy Ignore a warning naming it.
func (cr *compiledRule) evalError(field string, err error) Result {
	msg := fmt.Sprintf("rule %s could not be evaluated: %v", cr.rule.ID, err)
	if errors.Is(err, apiservercel.ErrOutOfBudget) {
		msg = fmt.Sprintf("rule %s exceeded the CEL cost budget: %v", cr.rule.ID, err)
	}
	action := shepherdv1alpha1.ActionDeny
	if cr.failurePolicy == shepherdv1alpha1.FailurePolicyIgnore {
		action = shepherdv1alpha1.ActionWarn
		msg += " (ignored: failurePolicy Ignore)"
	}
	return Result{Rule: cr.rule.ID, Action: action, Field: field, Message: msg, Reason: reasonInvalid, EvalError: true}
}

func (cr *compiledRule) evaluate(ctx context.Context, r *request, budget int64) ([]Result, int64) {
	if budget <= 0 {
		return []Result{cr.evalError("", apiservercel.ErrOutOfBudget)}, budget
	}
	vars := plugincel.OptionalVariableBindings{}
	if len(cr.rule.MatchConditions) > 0 {
		results, remaining, err := cr.matchConditions.ForInput(ctx, r.attrs, r.admission, vars, nil, budget)
		if err != nil {
			return []Result{cr.evalError("", err)}, remaining
		}
		budget = remaining
		var condErr error
		for i, res := range results {
			if res.Error != nil {
				condErr = errors.Join(condErr, fmt.Errorf("matchCondition %q: %w", cr.rule.MatchConditions[i].Name, res.Error))
				continue
			}
			if res.EvalResult != celtypes.True {
				// Any false condition skips the rule, even if others failed.
				return nil, budget
			}
		}
		if condErr != nil {
			return []Result{cr.evalError("", condErr)}, budget
		}
	}
	ns := plugincel.CreateNamespaceObject(r.in.NamespaceObject)
	results, remaining, err := cr.validations.ForInput(ctx, r.attrs, r.admission, vars, ns, budget)
	if err != nil {
		return []Result{cr.evalError("", err)}, remaining
	}
	budget = remaining
	var failed []int
	var out []Result
	for i, res := range results {
		v := cr.rule.Validations[i]
		switch {
		case res.Error != nil:
			out = append(out, cr.evalError(strings.TrimPrefix(v.FieldPath, "."), res.Error))
		case res.EvalResult != celtypes.True:
			failed = append(failed, i)
		}
	}
	if len(failed) == 0 {
		return out, budget
	}
	// Messages and field paths are computed only for failed validations'
	// rules; an error in them falls back to the static message and path.
	var messages, paths []plugincel.EvaluationResult
	if hasAny(cr.rule.Validations, func(v shepherdv1alpha1.Validation) bool { return v.MessageExpression != "" }) {
		messages, budget, _ = cr.messages.ForInput(ctx, r.attrs, r.admission, vars, ns, budget)
	}
	if hasAny(cr.rule.Validations, func(v shepherdv1alpha1.Validation) bool { return v.FieldPathsExpression != "" }) {
		paths, budget, _ = cr.fieldPaths.ForInput(ctx, r.attrs, r.admission, vars, ns, budget)
	}
	for _, i := range failed {
		v := cr.rule.Validations[i]
		msg := validationMessage(v, messages, i)
		reason := reasonInvalid
		if v.Reason != nil && *v.Reason == metav1.StatusReasonForbidden {
			reason = reasonForbidden
		}
		fields := fieldPaths(paths, i)
		if len(fields) == 0 {
			fields = []string{strings.TrimPrefix(v.FieldPath, ".")}
		}
		for _, f := range fields {
			out = append(out, Result{Rule: cr.rule.ID, Action: cr.action, Field: f, Message: msg, Reason: reason})
		}
	}
	return out, budget
}

func hasAny(vs []shepherdv1alpha1.Validation, f func(shepherdv1alpha1.Validation) bool) bool {
	return slices.ContainsFunc(vs, f)
}

// validationMessage picks the message as the apiserver does: a non-empty
// single-line messageExpression result, else message, else the expression.
func validationMessage(v shepherdv1alpha1.Validation, messages []plugincel.EvaluationResult, i int) string {
	if i < len(messages) && messages[i].Error == nil && messages[i].EvalResult != nil {
		if s, ok := messages[i].EvalResult.Value().(string); ok {
			s = strings.TrimSpace(s)
			if s != "" && !strings.Contains(s, "\n") && len(s) <= celconfig.MaxEvaluatedMessageExpressionSizeBytes {
				return s
			}
		}
	}
	if m := strings.TrimSpace(v.Message); m != "" {
		return m
	}
	return "failed expression: " + strings.TrimSpace(v.Expression)
}

func fieldPaths(paths []plugincel.EvaluationResult, i int) []string {
	if i >= len(paths) || paths[i].Error != nil || paths[i].EvalResult == nil {
		return nil
	}
	lister, ok := paths[i].EvalResult.(traits.Lister)
	if !ok {
		return nil
	}
	var out []string
	it := lister.Iterator()
	for it.HasNext() == celtypes.True {
		if s, ok := it.Next().(celtypes.String); ok && s != "" {
			out = append(out, string(s))
		}
	}
	return out
}
