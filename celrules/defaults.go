package celrules

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// The defaulting rules, defined once, as MutatingAdmissionPolicies: one
// entry per D-rule. The webhook and `shepherd check` run them in-process
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

// defaultRule is one defaulting rule as a MutatingAdmissionPolicy.
type defaultRule struct {
	ID   string
	Kind schema.GroupKind
	// build returns the policy's body for the context, or why nothing is
	// exported under it (a rule that would never change an object there).
	build func(c defaultContext) (mapBody, string)
	// Description is the rule's line in listings.
	Description string
	// Warning is what the webhook and `shepherd check` tell the user when
	// the rule changed the object; an exported policy cannot warn.
	Warning string
}

// mapBody is the part of a MutatingAdmissionPolicy spec a rule decides.
type mapBody struct {
	variables       []admissionregistrationv1.Variable
	matchConditions []admissionregistrationv1.MatchCondition
	// patches are JSONPatch expressions, applied in order.
	patches []string
}

// defaultContext is what a rule's policy depends on: the configuration
// (which rules are on, D-PCS-5's default, D-JS-2's rewrite) and the target
// schemas (the knobs' forms).
type defaultContext struct {
	cfg Config
	s   *Schemas
}

var (
	podCliqueSet = schema.GroupKind{Group: api.GroveGroup, Kind: api.KindPodCliqueSet}
	jobSet       = schema.GroupKind{Group: api.JobSetGroup, Kind: api.KindJobSet}
)

// defaultRules is the table.
var defaultRules = []defaultRule{
	{ID: "D-PCS-1", Description: "workloadType unset -> Inference", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// workloadType set in neither form -> Inference, in the form the
		// schema keeps.
		k := grove.WorkloadType
		return mapBody{
			matchConditions: append(c.hasSpec(), cond("workload-type-unset", "!("+c.knobRaw(k)+").hasValue()")),
			patches:         []string{c.setKnob(k, "'Inference'")},
		}, ""
	}},
	{ID: "D-PCS-2", Description: "Training: template.terminationDelay unset -> 0s", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// Training: template.terminationDelay unset -> 0s; not where the
		// workload type is a carrier (Grove's own schema, whose webhook
		// rejects 0s).
		if grove.WorkloadType.Form(c.s) != knob.Field {
			return mapBody{}, "does nothing on these schemas: they have no " + grove.WorkloadType.FieldPath(knob.Field) + " (Grove's own PodCliqueSet schema), and there Grove's webhook rejects a terminationDelay of 0s"
		}
		return mapBody{
			matchConditions: append(c.hasSpec(), c.isWorkloadType("Training"),
				cond("termination-delay-unset", "object.spec.?template.hasValue() && !object.spec.template.?terminationDelay.hasValue()")),
			patches: []string{"[JSONPatch{op: 'add', path: '/spec/template/terminationDelay', value: '0s'}]"},
		}, ""
	}},
	{ID: "D-PCS-3", Description: "Training: clique podSpec.restartPolicy unset -> Never", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// Training: every clique's podSpec.restartPolicy unset -> Never.
		return mapBody{
			matchConditions: append(c.hasSpec(), c.isWorkloadType("Training")),
			patches: []string{`object.spec.?template.?cliques.orValue([]).transformList(i, c,
  c.?spec.?podSpec.hasValue() && !c.spec.podSpec.?restartPolicy.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/cliques/' + string(i) + '/spec/podSpec/restartPolicy', value: 'Never'})`},
		}, ""
	}},
	{ID: "D-PCS-4", Description: "Training: trainingSpec.maxRestarts unset -> 0", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// Training: maxRestarts unset in either form -> 0, in the form the
		// schema keeps (a carrier set on an object stored before a CRD
		// upgrade added the field is not shadowed by a field default).
		k := grove.MaxRestarts
		body := mapBody{matchConditions: append(c.hasSpec(), c.isWorkloadType("Training"),
			cond("max-restarts-carrier-unset", "!("+k.CELRaw(knob.Annotation, "object")+").hasValue()"))}
		if k.Form(c.s) == knob.Annotation {
			body.patches = []string{c.setKnob(k, "'0'")}
			return body, ""
		}
		body.patches = []string{`!object.spec.?trainingSpec.hasValue() ?
  [JSONPatch{op: 'add', path: '/spec/trainingSpec', value: {'maxRestarts': 0}}] :
!object.spec.trainingSpec.?maxRestarts.hasValue() ?
  [JSONPatch{op: 'add', path: '/spec/trainingSpec/maxRestarts', value: 0}] :
  []`}
		return body, ""
	}},
	{ID: "D-PCS-5", Description: "Inference: template.terminationDelay unset -> the configured default (none shipped)", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// Inference: template.terminationDelay unset -> the configured
		// default.
		if c.cfg.InferenceTerminationDelay == nil {
			return mapBody{}, "no default terminationDelay for Inference PodCliqueSets is configured (serve's --inference-termination-delay; none is shipped)"
		}
		return mapBody{
			matchConditions: append(c.hasSpec(), c.isWorkloadType("Inference"),
				cond("termination-delay-unset", "object.spec.?template.hasValue() && !object.spec.template.?terminationDelay.hasValue()")),
			patches: []string{fmt.Sprintf("[JSONPatch{op: 'add', path: '/spec/template/terminationDelay', value: '%s'}]", c.cfg.InferenceTerminationDelay.Duration)},
		}, ""
	}},
	{ID: "D-PCS-6", Description: "clique and scaling-group minAvailable unset -> replicas", Kind: podCliqueSet, build: func(c defaultContext) (mapBody, string) {
		// minAvailable unset -> replicas, for cliques and scaling groups
		// that have replicas.
		return mapBody{
			matchConditions: c.hasSpec(),
			patches: []string{
				`object.spec.?template.?cliques.orValue([]).transformList(i, c,
  c.?spec.?replicas.hasValue() && !c.spec.?minAvailable.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/cliques/' + string(i) + '/spec/minAvailable', value: c.spec.replicas})`,
				`object.spec.?template.?podCliqueScalingGroups.orValue([]).transformList(i, g,
  g.?replicas.hasValue() && !g.?minAvailable.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/podCliqueScalingGroups/' + string(i) + '/minAvailable', value: g.replicas})`,
			},
		}, ""
	}},
	{ID: "D-JS-1", Description: "startupPolicy without order -> AnyOrder", Kind: jobSet, build: func(defaultContext) (mapBody, string) {
		// A startupPolicy without order means AnyOrder.
		return mapBody{
			matchConditions: []admissionregistrationv1.MatchCondition{cond("startup-order-unset",
				"object.?spec.?startupPolicy.hasValue() && !object.spec.startupPolicy.?startupPolicyOrder.hasValue()")},
			patches: []string{"[JSONPatch{op: 'add', path: '/spec/startupPolicy/startupPolicyOrder', value: 'AnyOrder'}]"},
		}, ""
	}},
	{ID: "D-JS-2", Description: "startupPolicy InOrder without dependsOn -> the equivalent dependsOn chain, with a deprecation warning", Kind: jobSet, Warning: "spec.startupPolicy: startupPolicyOrder InOrder is deprecated and was rewritten to the equivalent replicatedJobs[].dependsOn chain (each replicatedJob waits for the previous one to be Ready)", build: func(c defaultContext) (mapBody, string) {
		// startupPolicy InOrder without dependsOn -> the equivalent
		// dependsOn chain. On UPDATE also when the dependsOn already are
		// that chain (a client re-sent startupPolicy after the rewrite), and
		// never for a stored object that still has a startupPolicy: the
		// rewrite would change immutable fields.
		if c.cfg.DisableStartupPolicyRewrite {
			return mapBody{}, "the rewrite is switched off (--disable-startup-policy-rewrite): D-JS-2 does nothing then, and V-JS-5 warns of InOrder"
		}
		return mapBody{
			matchConditions: []admissionregistrationv1.MatchCondition{cond("in-order",
				"object.?spec.?startupPolicy.?startupPolicyOrder.orValue('') == 'InOrder'")},
			// The replicatedJobs are read from object in each expression
			// (not through a variable, which the type checker only knows as
			// dyn) so that their fields are type-checked.
			variables: []admissionregistrationv1.Variable{
				{Name: "noDependsOn", Expression: "object.spec.?replicatedJobs.orValue([]).all(rj, size(rj.?dependsOn.orValue([])) == 0)"},
				{Name: "isChain", Expression: `object.spec.?replicatedJobs.orValue([]).all(i, rj, i == 0 ?
  size(rj.?dependsOn.orValue([])) == 0 :
  size(rj.?dependsOn.orValue([])) == 1 && rj.dependsOn[0].name == object.spec.replicatedJobs[i - 1].name && rj.dependsOn[0].status == 'Ready')`},
				{Name: "rewrite", Expression: `(variables.noDependsOn || (request.operation == 'UPDATE' && variables.isChain)) &&
  (request.operation != 'UPDATE' || !oldObject.?spec.?startupPolicy.hasValue())`},
			},
			// string(): the apiserver compiles with an untyped object, and
			// a map literal's values must have one type.
			patches: []string{`variables.rewrite ?
  object.spec.?replicatedJobs.orValue([]).transformList(i, rj, i > 0,
    JSONPatch{op: 'add', path: '/spec/replicatedJobs/' + string(i) + '/dependsOn', value: [{'name': string(object.spec.replicatedJobs[i - 1].name), 'status': 'Ready'}]}) +
  [JSONPatch{op: 'remove', path: '/spec/startupPolicy'}] :
  []`},
		}, ""
	}},
}

func cond(name, expression string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: expression}
}

// hasSpec: the PodCliqueSet defaulter does nothing to an object without a
// spec.
func (defaultContext) hasSpec() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{cond("has-spec", "has(object.spec)")}
}

// knobRaw is the optional of a knob's stored value as package knob reads
// it (Lookup): the seed field, else the carrier; only the carrier where
// the schema lacks the field (which the apiserver has pruned, and which an
// expression may not name).
func (c defaultContext) knobRaw(k knob.Knob) string {
	if k.Form(c.s) == knob.Annotation {
		return k.CELRaw(knob.Annotation, "object")
	}
	return k.CELRaw(knob.Field, "object") + ".or(" + k.CELRaw(knob.Annotation, "object") + ")"
}

// workloadType is the workload type a rule acts on: the one
// set, else the one D-PCS-1 gives an unset type when it is enabled.
func (c defaultContext) workloadType() string {
	def := ""
	if c.cfg.Enabled("D-PCS-1") {
		def = "Inference"
	}
	return fmt.Sprintf("(%s).orValue('%s')", c.knobRaw(grove.WorkloadType), def)
}

func (c defaultContext) isWorkloadType(t string) admissionregistrationv1.MatchCondition {
	return cond(strings.ToLower(t), fmt.Sprintf("%s == '%s'", c.workloadType(), t))
}

// setKnob is the JSON patch that sets an unset knob of a top-level spec
// field to value (a CEL string literal for the carrier, the typed literal
// for the field), in the form the schema keeps.
func (c defaultContext) setKnob(k knob.Knob, value string) string {
	if k.Form(c.s) == knob.Field {
		return fmt.Sprintf("[JSONPatch{op: 'add', path: '/%s', value: %s}]", strings.Join(k.Path, "/"), value)
	}
	return fmt.Sprintf(`has(object.metadata.annotations) ?
  [JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('%[1]s'), value: %[2]s}] :
  [JSONPatch{op: 'add', path: '/metadata/annotations', value: {'%[1]s': %[2]s}}]`, k.Annotation, value)
}

// DefaultRuleIDs are the defaulting rules that export as
// MutatingAdmissionPolicies, in table order.
func DefaultRuleIDs() []string {
	out := make([]string, len(defaultRules))
	for i, r := range defaultRules {
		out[i] = r.ID
	}
	return out
}

// DefaultRuleInfos lists the defaulting rules, in table order. They run
// as MutatingAdmissionPolicies: in-process (Engine.Default), or exported
// (`shepherd export map`) to the apiserver; a ValidatingAdmissionPolicy
// cannot mutate.
func DefaultRuleInfos() []RuleInfo {
	out := make([]RuleInfo, len(defaultRules))
	for i, r := range defaultRules {
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
	c := defaultContext{cfg: cfg, s: s}
	var policies []*admissionregistrationv1.MutatingAdmissionPolicy
	var bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	var skipped []NotExported
	for _, r := range defaultRules {
		if !cfg.Enabled(r.ID) {
			continue
		}
		body, why := r.build(c)
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
func exportDefault(r defaultRule, body mapBody, s *Schemas, namespace string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
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
			Variables:          body.variables,
			MatchConditions:    append(slices.Clone(body.matchConditions), GoUpdateCondition()),
			FailurePolicy:      &fail,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	for _, e := range body.patches {
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
