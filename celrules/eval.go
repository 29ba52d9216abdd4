package celrules

import (
	"context"
	"fmt"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

const (
	reasonInvalid   = string(field.ErrorTypeInvalid)
	reasonForbidden = string(field.ErrorTypeForbidden)
)

// objectInterfaces: shepherd evaluates the version it is sent (its rules
// name the versions the webhook is sent), so no conversion is needed and no
// resource has equivalents.
var objectInterfaces = admission.NewObjectInterfacesFromScheme(runtime.NewScheme())

// request is one admission as the apiserver's admission-policy packages see
// it: attributes, the objects as lazily converted CEL values (shared by every
// rule, as the apiserver shares them across policies), and the matcher that
// resolves the request's namespace through the Input.
type request struct {
	ctx     context.Context
	in      *Input
	attr    admission.Attributes
	matcher generic.PolicyMatcher
	// versioned is built on the first rule that matches.
	versioned *admission.VersionedAttributes

	nsDone bool
	ns     *corev1.Namespace
	nsErr  error
}

func newRequest(ctx context.Context, in *Input) *request {
	var obj, old runtime.Object
	if in.Object != nil {
		obj = &unstructured.Unstructured{Object: in.Object}
	}
	if in.OldObject != nil {
		old = &unstructured.Unstructured{Object: in.OldObject}
	}
	userInfo := &user.DefaultInfo{Name: in.UserInfo.Username, UID: in.UserInfo.UID, Groups: in.UserInfo.Groups}
	if len(in.UserInfo.Extra) > 0 {
		userInfo.Extra = map[string][]string{}
		for k, v := range in.UserInfo.Extra {
			userInfo.Extra[k] = v
		}
	}
	r := &request{ctx: ctx, in: in}
	r.attr = admission.NewAttributesRecord(obj, old,
		schema.GroupVersionKind{Group: in.Group, Version: in.Version, Kind: in.Kind},
		in.Namespace, in.Name,
		schema.GroupVersionResource{Group: in.Group, Version: in.Version, Resource: in.Resource},
		"", admission.Operation(in.Operation), nil, in.DryRun, userInfo)
	get := namespaceGetter(r.namespace)
	r.matcher = generic.NewPolicyMatcher(matching.NewMatcher(namespaceLister{get}, namespaceClient{get: get}))
	return r
}

// namespace resolves the request's namespace once, through the Input; a
// namespace the Input does not know is NotFound, as the apiserver answers.
func (r *request) namespace(name string) (*corev1.Namespace, error) {
	if name != r.in.Namespace {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	if !r.nsDone {
		r.nsDone = true
		if r.in.Namespaces == nil {
			r.nsErr = apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		} else {
			r.ns, r.nsErr = r.in.Namespaces(r.ctx, name)
		}
		if r.nsErr == nil && r.ns == nil {
			r.nsErr = apierrors.NewNotFound(corev1.Resource("namespaces"), name)
		}
	}
	return r.ns, r.nsErr
}

// namespaceObject is the request's Namespace for the namespaceObject
// variable: nil for a cluster-scoped object (and for the Namespace kind
// itself, as in the apiserver), and nil too when it cannot be found —
// offline, `shepherd check` usually has no Namespace; a namespaceSelector
// still fails with the lookup's error, as in the apiserver.
func (r *request) namespaceObject() *corev1.Namespace {
	if r.in.Namespace == "" || (r.in.Group == "" && r.in.Kind == "Namespace") {
		return nil
	}
	ns, _ := r.namespace(r.in.Namespace)
	return ns
}

// versionedAttributes are the attributes as the validator reads them; the
// rules match the version they are sent, so there is nothing to convert.
func (r *request) versionedAttributes(gvk schema.GroupVersionKind) *admission.VersionedAttributes {
	if r.versioned == nil || r.versioned.VersionedKind != gvk {
		va := &admission.VersionedAttributes{Attributes: r.attr, VersionedKind: gvk}
		va.VersionedObject.Set(r.attr.GetObject())
		va.VersionedOldObject.Set(r.attr.GetOldObject())
		r.versioned = va
	}
	return r.versioned
}

// evaluate runs one rule as the apiserver runs its ValidatingAdmissionPolicy
// with one binding: the policy matcher (resources, operations, namespace
// and object selectors), then the validator with the policy's own runtime
// budget (matchConditions with theirs), then shepherd's field paths for the
// validations that failed.
func (cr *compiledRule) evaluate(r *request) []Result {
	if cr.outsideNamespaces(r) {
		return nil
	}
	matches, gvr, gvk, err := r.matcher.DefinitionMatches(r.attr, objectInterfaces, cr.accessor)
	if err != nil {
		// A configuration error, such as an unknown namespace: the
		// apiserver applies the policy's failurePolicy to it.
		return cr.evalError("", fmt.Errorf("failed to configure policy: %w", err))
	}
	if !matches {
		return nil
	}
	va := r.versionedAttributes(gvk)
	if cr.onUpdate != nil && r.attr.GetOperation() == admission.Update {
		m := cr.onUpdate.Match(r.ctx, va, nil, nil)
		if m.Error != nil {
			return cr.evalError("", m.Error)
		}
		if !m.Matches {
			return nil // the update changes nothing the rule reads
		}
	}
	var ns *corev1.Namespace
	if cr.readsNamespace {
		ns = r.namespaceObject()
	}
	res := cr.validator.Validate(r.ctx, gvr, va, nil, ns, celconfig.RuntimeCELCostBudget, nil)
	var out []Result
	for i, d := range res.Decisions {
		// Decisions are one per validation, in order, unless the rule
		// failed as a whole (a matchCondition error, the budget): then
		// there is one, with no validation to name.
		var v *shepherdv1alpha1.Validation
		if len(res.Decisions) == len(cr.rule.Validations) {
			v = &cr.rule.Validations[i]
		}
		switch {
		case d.Evaluation == validating.EvalError:
			path := ""
			if v != nil {
				path = strings.TrimPrefix(v.FieldPath, ".")
			}
			out = append(out, cr.evalError(path, fmt.Errorf("%s", d.Message))...)
		case d.Action == validating.ActionDeny:
			reason := reasonInvalid
			if d.Reason == metav1.StatusReasonForbidden {
				reason = reasonForbidden
			}
			for _, f := range cr.failedPaths(r, va, ns, i, v) {
				out = append(out, Result{Rule: cr.rule.ID, Action: cr.action, Field: f, Message: Named(cr.rule.ID, d.Message), Reason: reason})
			}
		}
	}
	return out
}

// outsideNamespaces says the rule's namespaceSelector does not match the
// request's namespace: what the apiserver's matcher checks first, and
// answers "no match" to without looking further. The matcher parses the
// selector again on every request (generic's matchCriteria), which with
// thousands of per-team policies was most of an admission's CPU; the
// selector parsed once answers the same, and everything else (a
// cluster-scoped object, a Namespace, a namespace that cannot be found)
// is left to the matcher.
func (cr *compiledRule) outsideNamespaces(r *request) bool {
	if cr.nsSelector == nil || r.in.Namespace == "" || r.in.Resource == "namespaces" {
		return false
	}
	ns, err := r.namespace(r.in.Namespace)
	if err != nil {
		return false
	}
	return !cr.nsSelector.Matches(labels.Set(ns.Labels))
}

// evalError is the result of a rule that could not be evaluated. With
// failurePolicy Fail it is a violation with the rule's action, as the
// apiserver hands an errored decision to the binding's validationActions;
// with Ignore the apiserver admits silently, and shepherd records it for
// the audit trail only.
func (cr *compiledRule) evalError(path string, err error) []Result {
	msg := fmt.Sprintf("rule %s could not be evaluated: %v", cr.rule.ID, err)
	if overCost(err) {
		msg += costAdvice
	}
	action := cr.action
	if cr.rule.failurePolicy() == shepherdv1alpha1.FailurePolicyIgnore {
		action = shepherdv1alpha1.ActionAudit
		msg += " (ignored: failurePolicy Ignore)"
	}
	return []Result{{Rule: cr.rule.ID, Action: action, Field: path, Message: msg, Reason: reasonInvalid, EvalError: true}}
}

// costAdvice says what to do about a rule over its CEL cost limit: the
// limit is the apiserver's own (celconfig), the same for the exported
// ValidatingAdmissionPolicy, so only the object or the rule can change.
const costAdvice = "; the object is too large for this rule within CEL's cost limit: make its lists or strings shorter, or ask a platform admin to make the rule cheaper"

// overCost reports whether err is CEL's cost limit (one expression's, or
// the policy's budget), as the apiserver words them: cel-go's interpreter
// and k8s.io/apiserver's admission/plugin/cel (its errors.go matches the
// same prefix).
func overCost(err error) bool {
	m := err.Error()
	return strings.Contains(m, "actual cost limit exceeded") || strings.Contains(m, "running out of cost budget")
}

// failedPaths are the field paths of failed validation i: its
// fieldPathsExpression's, or its static fieldPath. The expression has its
// own budget (a ValidatingAdmissionPolicy has no such expression, so the
// verdict never depends on it); when it fails, the static path stands.
func (cr *compiledRule) failedPaths(r *request, va *admission.VersionedAttributes, ns *corev1.Namespace, i int, v *shepherdv1alpha1.Validation) []string {
	if v == nil {
		return []string{""}
	}
	static := []string{strings.TrimPrefix(v.FieldPath, ".")}
	eval := cr.fieldPaths[i]
	if eval == nil {
		return static
	}
	req := plugincel.CreateAdmissionRequest(va.Attributes, metav1.GroupVersionResource(va.GetResource()), metav1.GroupVersionKind(va.VersionedKind))
	results, _, err := eval.ForInput(r.ctx, va, req, plugincel.OptionalVariableBindings{}, ns, celconfig.RuntimeCELCostBudget)
	if err != nil || len(results) != 1 || results[0].Error != nil {
		return static
	}
	lister, ok := results[0].EvalResult.(traits.Lister)
	if !ok {
		return static
	}
	var out []string
	for it := lister.Iterator(); it.HasNext() == celtypes.True; {
		if s, ok := it.Next().(celtypes.String); ok && s != "" {
			out = append(out, string(s))
		}
	}
	if len(out) == 0 {
		return static
	}
	return out
}

// namespaceGetter is how the matcher finds the request's namespace: the
// Input's own lookup (the informer cache in the webhook, the manifests
// given to `check` offline).
type namespaceGetter func(name string) (*corev1.Namespace, error)

// namespaceLister and namespaceClient adapt a namespaceGetter to what the
// apiserver's namespace matcher asks for: a lister first, then a live read
// on a miss; both are the same lookup here.
type namespaceLister struct{ get namespaceGetter }

func (l namespaceLister) List(labels.Selector) ([]*corev1.Namespace, error) {
	return nil, fmt.Errorf("listing namespaces is not supported")
}
func (l namespaceLister) Get(name string) (*corev1.Namespace, error) { return l.get(name) }

var _ corev1listers.NamespaceLister = namespaceLister{}

type namespaceClient struct {
	kubernetes.Interface
	get namespaceGetter
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface {
	return namespaceCoreV1{get: c.get}
}

// namespaceCoreV1 serves only Namespaces: the one thing the matcher reads.
type namespaceCoreV1 struct {
	corev1client.CoreV1Interface
	get namespaceGetter
}

func (c namespaceCoreV1) Namespaces() corev1client.NamespaceInterface {
	return namespaceInterface{get: c.get}
}

type namespaceInterface struct {
	corev1client.NamespaceInterface
	get namespaceGetter
}

func (n namespaceInterface) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return n.get(name)
}
