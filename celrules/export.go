package celrules

import (
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// LabelRule marks exported policies and bindings with the rule they carry.
const LabelRule = "shepherd.dev/rule"

// ExemptVariable is the variable with which an exported policy exempts the
// objects a PolicyException selects (webhook/exceptions); rules may not
// define one of this name.
const ExemptVariable = "shepherd_exempt"

// PolicyName is the name of the ValidatingAdmissionPolicy (and binding) a
// rule exports as: shepherd-v-tj-1 for built-in rule V-TJ-1,
// shepherd-policy-<name> for a WorkloadPolicy.
func PolicyName(id string, source Source) string {
	if source == SourcePolicy {
		return "shepherd-policy-" + id
	}
	return "shepherd-" + strings.ToLower(id)
}

// Named is message as a user reads it: ending with the rule that judged,
// "... (shepherd V-TJ-1)", so that kubectl's denial and warnings say who
// denied and which rule to look up in docs/rules.md (Kyverno names its
// policy the same way). A message that already names the rule is kept.
func Named(id, message string) string {
	suffix := namedSuffix(id)
	if id == "" || strings.HasSuffix(message, suffix) {
		return message
	}
	return message + suffix
}

// Unnamed is message without the rule Named added: for records that
// carry the rule in a field of their own.
func Unnamed(id, message string) string {
	return strings.TrimSuffix(message, namedSuffix(id))
}

func namedSuffix(id string) string { return " (shepherd " + id + ")" }

// namedPolicy sets the messages of an exported policy to name the rule
// (Named), as the engine names its decisions' messages after evaluation
// (evaluate): the engine compiles the rule's own messages, so that rules
// with the same expressions share their compiled conditions. A
// messageExpression keeps the apiserver's fallbacks: when it gives no
// text (empty or blank, not a string, an error) the static message is
// used, which names the rule too; the expression is evaluated once (a
// one-element map: the apiserver's CEL has no let). A validation with
// neither gets the apiserver's own fallback text ("failed expression:
// ..."), named.
func namedPolicy(id string, vap *admissionregistrationv1.ValidatingAdmissionPolicy) {
	for i := range vap.Spec.Validations {
		v := &vap.Spec.Validations[i]
		if strings.TrimSpace(v.Message) == "" {
			v.Message = "failed expression: " + strings.TrimSpace(v.Expression)
		}
		v.Message = Named(id, strings.TrimSpace(v.Message))
		if v.MessageExpression != "" {
			v.MessageExpression = "[" + v.MessageExpression + "].map(m, m.trim() == '' ? '' : m.trim() + '" + namedSuffix(id) + "')[0]"
		}
	}
}

// exportRule renders a rule as a ValidatingAdmissionPolicy and its binding:
// the definition the engine itself compiles and matches with (compileRule),
// so the two decide alike by construction. The binding applies the policy
// where shepherd's webhooks apply: never in kube-system nor in shepherd's
// own namespace (excludeNamespace; api.DefaultNamespace when empty).
// A ValidatingAdmissionPolicy validation has no field path: fieldPath and
// fieldPathsExpression are shepherd's own and are not exported (the message
// is, and verdicts are the same).
// Resources are listed with the CRD's explicit versions (not "*"), so the
// apiserver type-checks the exported expressions against the schemas.
func exportRule(r Rule, reads ruleReads, source Source, s *Schemas, excludeNamespace ...string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	name := PolicyName(r.ID, source)
	meta := metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": api.FieldManager},
	}
	if len(r.ID) <= 63 {
		meta.Labels[LabelRule] = r.ID
	}
	fail := admissionregistrationv1.Fail
	if r.failurePolicy() == shepherdv1alpha1.FailurePolicyIgnore {
		fail = admissionregistrationv1.Ignore
	}
	equivalent := admissionregistrationv1.Equivalent
	mc := &admissionregistrationv1.MatchResources{
		NamespaceSelector: r.Match.NamespaceSelector.DeepCopy(),
		ObjectSelector:    r.Match.ObjectSelector.DeepCopy(),
		MatchPolicy:       &equivalent,
	}
	if mc.NamespaceSelector == nil {
		mc.NamespaceSelector = &metav1.LabelSelector{}
	}
	if mc.ObjectSelector == nil {
		mc.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rr := range r.Match.Resources {
		mc.ResourceRules = append(mc.ResourceRules, exportResourceRule(rr, s))
	}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: *meta.DeepCopy(),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: mc,
		},
	}
	for _, c := range r.MatchConditions {
		vap.Spec.MatchConditions = append(vap.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: c.Name, Expression: c.Expression})
	}
	if c, ok := reads.updateCondition(); ok {
		vap.Spec.MatchConditions = append(vap.Spec.MatchConditions, c)
	}
	for _, v := range r.Variables {
		vap.Spec.Variables = append(vap.Spec.Variables, admissionregistrationv1.Variable{Name: v.Name, Expression: v.Expression})
	}
	for _, v := range r.Validations {
		vap.Spec.Validations = append(vap.Spec.Validations, admissionregistrationv1.Validation{
			Expression:        v.Expression,
			Message:           v.Message,
			MessageExpression: v.MessageExpression,
			Reason:            v.Reason,
		})
	}
	var actions []admissionregistrationv1.ValidationAction
	switch r.action() {
	case shepherdv1alpha1.ActionWarn:
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	case shepherdv1alpha1.ActionAudit:
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	default:
		actions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: meta,
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: actions,
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key:      corev1.LabelMetadataName,
					Operator: metav1.LabelSelectorOpNotIn,
					Values:   excludedNamespaces(excludeNamespace),
				}}},
				ObjectSelector: &metav1.LabelSelector{},
				MatchPolicy:    &equivalent,
			},
		},
	}
	return vap, binding
}

// excludedNamespaces are the namespaces exported bindings leave out, as
// the webhook configurations do.
func excludedNamespaces(shepherd []string) []string {
	ns := api.DefaultNamespace
	if len(shepherd) > 0 && shepherd[0] != "" {
		ns = shepherd[0]
	}
	return []string{api.SystemNamespace, ns}
}

func exportResourceRule(rr shepherdv1alpha1.ResourceRule, s *Schemas) admissionregistrationv1.NamedRuleWithOperations {
	ops := rr.Operations
	if len(ops) == 0 {
		ops = []string{"CREATE", "UPDATE"}
	}
	var resources, versions []string
	add := func(list *[]string, v string) {
		if !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	wildcardVersion := false
	for _, g := range rr.APIGroups {
		for _, k := range rr.Kinds {
			if k == "*" || g == "*" {
				add(&resources, "*")
				wildcardVersion = true
				continue
			}
			gk := schema.GroupKind{Group: g, Kind: k}
			res, ok := webhookResource(gk)
			if !ok && s != nil {
				res = s.Resource(gk)
			}
			add(&resources, res)
			var vs []string
			if s != nil {
				vs = s.Versions(gk)
			}
			if len(vs) == 0 {
				wildcardVersion = true
			}
			for _, v := range vs {
				add(&versions, v)
			}
		}
	}
	for _, r := range rr.Resources {
		add(&resources, r)
		wildcardVersion = true
	}
	if wildcardVersion || len(versions) == 0 {
		versions = []string{"*"}
	}
	var operations []admissionregistrationv1.OperationType
	for _, op := range ops {
		operations = append(operations, admissionregistrationv1.OperationType(op))
	}
	scope := admissionregistrationv1.AllScopes
	return admissionregistrationv1.NamedRuleWithOperations{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: operations,
			Rule: admissionregistrationv1.Rule{
				APIGroups:   slices.Clone(rr.APIGroups),
				APIVersions: versions,
				Resources:   resources,
				Scope:       &scope,
			},
		},
	}
}

// WithAudit adds Audit to a binding's validationActions: only then does the
// apiserver put a failed validation into its audit event (the
// validation_failure annotation the audit sink reads). Deny and Warn each
// combine with Audit.
func WithAudit(actions []admissionregistrationv1.ValidationAction) []admissionregistrationv1.ValidationAction {
	if slices.Contains(actions, admissionregistrationv1.Audit) {
		return actions
	}
	return append(slices.Clone(actions), admissionregistrationv1.Audit)
}
