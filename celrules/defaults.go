package celrules

import (
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	// The rules, defaults, knobs and Go checks are those the integrations
	// register: every engine and chain — serve's, offline's, a test's — has
	// every integration.
	_ "github.com/shepherd-k8s/shepherd/integrations/all"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// The defaulting rules, defined once, as MutatingAdmissionPolicies: each
// integration writes its own (mapdefault.Rule: integrations/grove's
// D-PCS-*, integrations/jobset's D-JS-*) and registers them
// (integrations.Defaults). The webhook and `shepherd check` run them in-process
// with the apiserver's mutating machinery (Engine.Default, defaulting.go);
// `shepherd export map` writes the same policies for clusters that should
// default natively, so the two agree by construction. test/vap applies the
// exported policies to a real kube-apiserver and checks that every object
// it admits is the one the chain returns, and the unit tests type-check
// every policy against the upstream and the seed-shaped schemas.
//
// What each policy reads, and why:
//
//   - A seed knob is written in the form the target schemas keep (Form:
//     the seed field, or its carrier annotation where the field would be
//     pruned) and read as package knob reads it (the field, else the
//     carrier), as the rest of shepherd does from the same Schemas.
//   - Policies do not depend on the order the apiserver runs them in: a
//     rule that acts on the workload type reads the type D-PCS-1 gives an
//     unset one (Inference, when D-PCS-1 is enabled) rather than waiting
//     for D-PCS-1's policy to have run. That is why reinvocationPolicy is
//     Never, as for shepherd's mutating webhook.
//   - Defaults are JSON patches: most go into list items (cliques, scaling
//     groups, replicatedJobs), and an ApplyConfiguration may not change an
//     atomic list — podCliqueScalingGroups is one in every Grove schema,
//     cliques in the seed-shaped one — while a JSON patch addresses an item
//     by index whatever the list type, and sets an annotation as simply.
//   - Only "add" (of an absent field), and D-JS-2's "remove": the
//     apiserver has dropped null values before admission, so absent is
//     unset.
//
// D-WL-1 is not here: it needs lookups of the owning TrainJob and its
// runtime, which a policy cannot make; the webhook keeps it.

// DefaultRuleIDs are the defaulting rules that export as
// MutatingAdmissionPolicies, in framework order (integrations.Defaults).
func DefaultRuleIDs() []string {
	rules := integrations.Defaults()
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.ID
	}
	return out
}

// DefaultRuleInfos lists the defaulting rules, in framework order (integrations.Defaults). They run
// as MutatingAdmissionPolicies: in-process (Engine.Default), or exported
// (`shepherd export map`) to the apiserver; a ValidatingAdmissionPolicy
// cannot mutate.
func DefaultRuleInfos() []RuleInfo {
	rules := integrations.Defaults()
	out := make([]RuleInfo, len(rules))
	for i, r := range rules {
		out[i] = RuleInfo{ID: r.ID, Kinds: []string{r.Kind.Kind}, Action: "Default", Exportable: true, Source: SourceBuiltin, Description: r.Description,
			Reason: "defaulting (mutating webhook); a ValidatingAdmissionPolicy cannot mutate"}
	}
	return out
}

// NotExported is an enabled rule `export` writes no policy for, and why.
type NotExported struct {
	ID     string
	Kinds  []string
	Reason string
}

// ExportDefaults renders every enabled defaulting rule of the table as a
// MutatingAdmissionPolicy and its binding, for the configuration and the
// schemas of cfg (the pinned upstream ones when nil): the knobs in the
// form those schemas keep, D-PCS-5 with the configured default, D-JS-2
// unless its rewrite is switched off. Each policy is type-checked against
// the schemas first (the apiserver compiles a MutatingAdmissionPolicy with
// an untyped object and would report a misspelled field only when it
// fails on a request); one that does not type-check is not exported, like
// an inactive built-in rule. The bindings leave out kube-system and
// shepherd's namespace (cfg.Namespace), as the webhooks and the exported
// ValidatingAdmissionPolicies do. What is not exported is returned with
// the reason.
func ExportDefaults(cfg Config) ([]*admissionregistrationv1.MutatingAdmissionPolicy, []*admissionregistrationv1.MutatingAdmissionPolicyBinding, []NotExported, error) {
	s := cfg.Schemas
	if s == nil {
		var err error
		if s, err = PinnedSchemas(); err != nil {
			return nil, nil, nil, err
		}
	}
	c := mapdefault.Context{Schemas: s, Enabled: cfg.Enabled, InferenceTerminationDelay: cfg.InferenceTerminationDelay, DisableStartupPolicyRewrite: cfg.DisableStartupPolicyRewrite}
	var policies []*admissionregistrationv1.MutatingAdmissionPolicy
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	var skipped []NotExported
	for _, r := range integrations.Defaults() {
		if !cfg.Enabled(r.ID) {
			continue
		}
		body, why := r.Build(c)
		if why != "" {
			skipped = append(skipped, NotExported{ID: r.ID, Kinds: []string{r.Kind.Kind}, Reason: why})
			continue
		}
		p, b := exportDefault(r, body, s, cfg.Namespace)
		if errs := typeCheckMAP(p, r.Kind, s); len(errs) > 0 {
			skipped = append(skipped, NotExported{ID: r.ID, Kinds: []string{r.Kind.Kind},
				Reason: fmt.Sprintf("inactive: does not type-check against %s: %v", s.Source, errs.ToAggregate())})
			continue
		}
		policies = append(policies, p)
		bindings = append(bindings, b)
	}
	return policies, bindings, skipped, nil
}

// exportDefault assembles the policy and binding of a rule: named and
// labelled like the exported ValidatingAdmissionPolicies (shepherd-d-pcs-1),
// matching CREATE and UPDATE of the rule's kind at the versions the
// schemas serve, failurePolicy Fail and reinvocationPolicy Never as
// shepherd's mutating webhook.
func exportDefault(r mapdefault.Rule, body mapdefault.Body, s *Schemas, namespace string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	name := PolicyName(r.ID, SourceBuiltin)
	meta := metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": api.FieldManager, LabelRule: r.ID},
	}
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	rule := exportResourceRule(shepherdv1alpha1.ResourceRule{
		APIGroups: []string{r.Kind.Group}, Kinds: []string{r.Kind.Kind}, Operations: WebhookOperations,
	}, s)
	p := &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: *meta.DeepCopy(),
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
				ResourceRules:     []admissionregistrationv1.NamedRuleWithOperations{rule},
				MatchPolicy:       &equivalent,
			},
			Variables:          body.Variables,
			MatchConditions:    append(slices.Clone(body.MatchConditions), GoUpdateCondition()),
			FailurePolicy:      &fail,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	for _, e := range body.Patches {
		p.Spec.Mutations = append(p.Spec.Mutations, admissionregistrationv1.Mutation{
			PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: e},
		})
	}
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: meta,
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key:      corev1.LabelMetadataName,
					Operator: metav1.LabelSelectorOpNotIn,
					Values:   excludedNamespaces([]string{namespace}),
				}}},
				ObjectSelector: &metav1.LabelSelector{},
				MatchPolicy:    &equivalent,
			},
		},
	}
	return p, b
}
