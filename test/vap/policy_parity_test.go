package vap

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// parityCase is a set of WorkloadPolicies and the requests that probe them.
// Each request is answered three ways — by the policies exported as
// ValidatingAdmissionPolicies on the real apiserver, by the offline chain
// of `shepherd check`, and by `shepherd serve`'s webhook with the policies
// created in the cluster — and the three must agree, with each other and
// with what the apiserver is expected to say (so a case cannot pass by
// exercising nothing).
type parityCase struct {
	name     string
	policies []*shepherdv1alpha1.WorkloadPolicy
	requests []*parityRequest
	// fenceByCondition fences the case's policies into its namespaces by a
	// matchCondition rather than a namespaceSelector (see scoped).
	fenceByCondition bool
}

// parityRequest is one CREATE (old nil) or UPDATE of a TrainJob.
type parityRequest struct {
	name     string
	nsLabels map[string]string
	object   *unstructured.Unstructured
	old      *unstructured.Unstructured
	// deniedBy are the policies that deny the request; none: it is allowed.
	deniedBy []string
	// message is a part each denial's message must hold.
	message string
}

func create(name string, obj *unstructured.Unstructured, deniedBy ...string) *parityRequest {
	return &parityRequest{name: name, object: obj, deniedBy: deniedBy}
}

func update(name string, old, obj *unstructured.Unstructured, deniedBy ...string) *parityRequest {
	return &parityRequest{name: name, object: obj, old: old, deniedBy: deniedBy}
}

// in puts the request into a namespace with these labels ("key=value").
func (r *parityRequest) in(labels ...string) *parityRequest {
	r.nsLabels = map[string]string{}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		r.nsLabels[k] = v
	}
	return r
}

func (r *parityRequest) saying(message string) *parityRequest {
	r.message = message
	return r
}

func (r *parityRequest) operation() string {
	if r.old != nil {
		return "UPDATE"
	}
	return "CREATE"
}

type policyOpt func(*shepherdv1alpha1.WorkloadPolicySpec)

// policy is a Deny, failurePolicy Fail WorkloadPolicy on TrainJob CREATE
// and UPDATE. Every validation message is prefixed with the policy's name:
// the webhook's denial lists messages, not policies, and this is how its
// denials are attributed to policies.
func policy(name string, opts ...policyOpt) *shepherdv1alpha1.WorkloadPolicy {
	p := testkit.TrainJobPolicy(name).FailurePolicy(shepherdv1alpha1.FailurePolicyFail).Obj()
	for _, o := range opts {
		o(&p.Spec)
	}
	for i := range p.Spec.Validations {
		if m := p.Spec.Validations[i].Message; m != "" {
			p.Spec.Validations[i].Message = name + ": " + m
		}
	}
	return p
}

func validations(vs ...shepherdv1alpha1.Validation) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Validations = append(s.Validations, vs...) }
}

func validate(expression, message string) shepherdv1alpha1.Validation {
	return shepherdv1alpha1.Validation{Expression: expression, Message: message}
}

func matchConditions(mcs ...shepherdv1alpha1.MatchCondition) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.MatchConditions = append(s.MatchConditions, mcs...) }
}

func objectSelector(reqs ...metav1.LabelSelectorRequirement) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.ObjectSelector = &metav1.LabelSelector{MatchExpressions: reqs}
	}
}

func namespaceSelector(reqs ...metav1.LabelSelectorRequirement) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: reqs}
	}
}

func failurePolicy(fp shepherdv1alpha1.FailurePolicy) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.FailurePolicy = fp }
}

func operations(ops ...string) policyOpt {
	return func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Operations = ops }
}

func labelReq(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

// maxFour fails for the TrainJobs of more than four nodes the cases use to
// see whether a policy applies.
var maxFour = validate("object.spec.trainer.numNodes <= 4", "at most 4 nodes")

// gateOn errors on a TrainJob without the label gate (the map has no such
// key), is false for gate=off and true for gate=on.
const gateOn = "object.metadata.labels['gate'] == 'on'"

// manyCase is the case of many policies ranging all() and exists() over
// one list, which the determinism test repeats.
const manyCase = "many-all-exists"

func parityCases() []*parityCase {
	var cases []*parityCase
	add := func(c *parityCase) { cases = append(cases, c) }

	// objectSelector: the apiserver matches the new object's labels or the
	// old object's, and never an absent object (CREATE has no old object).
	// Each UPDATE changes the spec too: one that changes nothing the rule
	// reads is not judged at all (the case "ratchet").
	add(&parityCase{name: "objsel-in",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("objsel-in", objectSelector(labelReq("env", metav1.LabelSelectorOpIn, "prod")), validations(maxFour))},
		requests: []*parityRequest{
			create("create-prod", trainJob(8, "env=prod"), "objsel-in"),
			create("create-dev", trainJob(8, "env=dev")),
			create("create-unlabelled", trainJob(8)),
			update("update-prod-to-dev", trainJob(3, "env=prod"), trainJob(8, "env=dev"), "objsel-in"),
			update("update-dev-to-prod", trainJob(3, "env=dev"), trainJob(8, "env=prod"), "objsel-in"),
			update("update-dev-to-dev", trainJob(3, "env=dev"), trainJob(8, "env=dev")),
		}})
	add(&parityCase{name: "objsel-notin",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("objsel-notin", objectSelector(labelReq("env", metav1.LabelSelectorOpNotIn, "prod")), validations(maxFour))},
		requests: []*parityRequest{
			create("create-prod", trainJob(8, "env=prod")),
			create("create-dev", trainJob(8, "env=dev"), "objsel-notin"),
			create("create-unlabelled", trainJob(8), "objsel-notin"),
			update("update-prod-to-prod", trainJob(3, "env=prod"), trainJob(8, "env=prod")),
			update("update-prod-to-dev", trainJob(3, "env=prod"), trainJob(8, "env=dev"), "objsel-notin"),
			update("update-dev-to-prod", trainJob(3, "env=dev"), trainJob(8, "env=prod"), "objsel-notin"),
		}})
	add(&parityCase{name: "objsel-exists",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("objsel-exists", objectSelector(labelReq("team", metav1.LabelSelectorOpExists)), validations(maxFour))},
		requests: []*parityRequest{
			create("create-team", trainJob(8, "team=a"), "objsel-exists"),
			create("create-unlabelled", trainJob(8)),
			update("update-none-to-team", trainJob(3), trainJob(8, "team=a"), "objsel-exists"),
			update("update-team-to-none", trainJob(3, "team=a"), trainJob(8), "objsel-exists"),
			update("update-none-to-none", trainJob(3), trainJob(8)),
		}})
	add(&parityCase{name: "objsel-doesnotexist",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("objsel-doesnotexist", objectSelector(labelReq("team", metav1.LabelSelectorOpDoesNotExist)), validations(maxFour))},
		requests: []*parityRequest{
			create("create-team", trainJob(8, "team=a")),
			create("create-unlabelled", trainJob(8), "objsel-doesnotexist"),
			update("update-team-to-team", trainJob(3, "team=a"), trainJob(8, "team=b")),
			update("update-team-to-none", trainJob(3, "team=a"), trainJob(8), "objsel-doesnotexist"),
			update("update-none-to-team", trainJob(3), trainJob(8, "team=a"), "objsel-doesnotexist"),
		}})

	// namespaceSelector on the labels of the request's namespace.
	add(&parityCase{name: "nssel-notin",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("nssel-notin", namespaceSelector(labelReq("tier", metav1.LabelSelectorOpNotIn, "system")), validations(maxFour))},
		requests: []*parityRequest{
			create("create-system", trainJob(8)).in("tier=system"),
			create("create-user", trainJob(8), "nssel-notin").in("tier=user"),
			create("create-unlabelled", trainJob(8), "nssel-notin"),
			update("update-system", trainJob(3), trainJob(8)).in("tier=system"),
			update("update-unlabelled", trainJob(3), trainJob(8), "nssel-notin"),
		}})
	add(&parityCase{name: "nssel-doesnotexist",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("nssel-doesnotexist", namespaceSelector(labelReq("tier", metav1.LabelSelectorOpDoesNotExist)), validations(maxFour))},
		requests: []*parityRequest{
			create("create-labelled", trainJob(8)).in("tier=user"),
			create("create-unlabelled", trainJob(8), "nssel-doesnotexist"),
			update("update-unlabelled", trainJob(3), trainJob(8), "nssel-doesnotexist"),
		}})

	// An UPDATE is judged by a rule only when it changes what the rule reads
	// (celrules.UpdateConditionName): a stored TrainJob that breaks the
	// rule may have its labels changed, not its spec.
	add(&parityCase{name: "ratchet",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("ratchet", validations(maxFour))},
		requests: []*parityRequest{
			update("update-labels-of-breaking", trainJob(8), trainJob(8, "env=dev")),
			update("update-spec-of-breaking", trainJob(8), trainJob(6), "ratchet"),
			update("update-spec-fixing", trainJob(8), trainJob(4)),
		}})

	// Budgets: each policy has its own 10M (its validations and
	// messageExpressions), its matchConditions their own 2.5M.
	add(&parityCase{name: "budget-near",
		policies: []*shepherdv1alpha1.WorkloadPolicy{nearBudgetPolicy("budget-near-1"), nearBudgetPolicy("budget-near-2"), nearBudgetPolicy("budget-near-3")},
		requests: []*parityRequest{create("create-big", bigTrainJob(false))}})
	add(&parityCase{name: "budget-over",
		policies: []*shepherdv1alpha1.WorkloadPolicy{overBudgetPolicy("budget-over", shepherdv1alpha1.FailurePolicyFail)},
		requests: []*parityRequest{create("create-big", bigTrainJob(false), "budget-over").saying("cost budget")}})
	add(&parityCase{name: "budget-over-ignore",
		policies: []*shepherdv1alpha1.WorkloadPolicy{overBudgetPolicy("budget-over-ignore", shepherdv1alpha1.FailurePolicyIgnore)},
		requests: []*parityRequest{create("create-big", bigTrainJob(false))}})
	add(&parityCase{name: "mc-budget-own",
		policies: []*shepherdv1alpha1.WorkloadPolicy{heavyConditionsPolicy("mc-budget-own", conditionsWithinBudget, validationsBesideConditions)},
		requests: []*parityRequest{create("create-big", bigTrainJob(false))}})
	add(&parityCase{name: "mc-budget-over",
		policies: []*shepherdv1alpha1.WorkloadPolicy{heavyConditionsPolicy("mc-budget-over", conditionsOverBudget, 1)},
		requests: []*parityRequest{create("create-big", bigTrainJob(false), "mc-budget-over").saying("cost budget")}})

	// matchConditions: an error denies under Fail and skips the policy under
	// Ignore; a false condition skips it, even beside one that errors.
	add(&parityCase{name: "mc-error-fail",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("mc-error-fail", matchConditions(shepherdv1alpha1.MatchCondition{Name: "gated", Expression: gateOn}), validations(maxFour))},
		requests: []*parityRequest{
			create("create-ungated", trainJob(1, "team=a"), "mc-error-fail"),
			create("create-gate-on", trainJob(8, "gate=on"), "mc-error-fail"),
			create("create-gate-off", trainJob(8, "gate=off")),
		}})
	add(&parityCase{name: "mc-error-ignore",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("mc-error-ignore", failurePolicy(shepherdv1alpha1.FailurePolicyIgnore),
			matchConditions(shepherdv1alpha1.MatchCondition{Name: "gated", Expression: gateOn}), validations(maxFour))},
		requests: []*parityRequest{
			create("create-ungated", trainJob(8, "team=a")),
			create("create-gate-on", trainJob(8, "gate=on"), "mc-error-ignore"),
		}})
	add(&parityCase{name: "mc-false-wins",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("mc-false-wins", matchConditions(
			shepherdv1alpha1.MatchCondition{Name: "gated", Expression: gateOn},
			shepherdv1alpha1.MatchCondition{Name: "huge", Expression: "object.spec.trainer.numNodes > 100"},
		), validations(maxFour))},
		requests: []*parityRequest{
			create("create-ungated", trainJob(8, "team=a")),
			create("create-gate-on", trainJob(8, "gate=on")),
		}})

	// failurePolicy Ignore admits a validation that errors, not one that is
	// false; Fail denies both.
	add(&parityCase{name: "fp-ignore",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("fp-ignore", failurePolicy(shepherdv1alpha1.FailurePolicyIgnore), validations(validate(gateOn, "the gate must be on")))},
		requests: []*parityRequest{
			create("create-ungated", trainJob(1, "team=a")),
			create("create-gate-off", trainJob(1, "gate=off"), "fp-ignore"),
			create("create-gate-on", trainJob(1, "gate=on")),
		}})
	add(&parityCase{name: "fp-fail",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("fp-fail", validations(validate(gateOn, "the gate must be on")))},
		requests: []*parityRequest{
			create("create-ungated", trainJob(1, "team=a"), "fp-fail"),
			create("create-gate-on", trainJob(1, "gate=on")),
		}})

	// messageExpression: when it errors the message is the fallback.
	msgExpr := validate("object.spec.trainer.numNodes <= 4", "at most 4 nodes")
	msgExpr.MessageExpression = "'msgexpr: team ' + object.metadata.labels['team'] + ' may use at most 4 nodes'"
	add(&parityCase{name: "msgexpr",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("msgexpr", validations(msgExpr))},
		requests: []*parityRequest{
			create("create-no-team", trainJob(8, "env=dev"), "msgexpr").saying("msgexpr: at most 4 nodes"),
			create("create-team", trainJob(8, "team=a"), "msgexpr").saying("msgexpr: team a may use at most 4 nodes"),
		}})

	// Transition rules on oldObject.
	add(&parityCase{name: "transition-update",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("transition-update", operations("UPDATE"),
			validations(validate("object.spec.trainer.numNodes >= oldObject.spec.trainer.numNodes", "numNodes may not shrink")))},
		requests: []*parityRequest{
			create("create", trainJob(2)),
			update("update-shrink", trainJob(4), trainJob(2), "transition-update"),
			update("update-grow", trainJob(4), trainJob(8)),
		}})
	add(&parityCase{name: "transition-both",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("transition-both",
			validations(validate("oldObject == null || object.spec.trainer.numNodes >= oldObject.spec.trainer.numNodes", "numNodes may not shrink")))},
		requests: []*parityRequest{
			create("create", trainJob(2)),
			update("update-shrink", trainJob(4), trainJob(2), "transition-both"),
		}})
	add(&parityCase{name: "transition-labels",
		policies: []*shepherdv1alpha1.WorkloadPolicy{policy("transition-labels", operations("UPDATE"),
			validations(validate("!has(oldObject.metadata.labels) || !('team' in oldObject.metadata.labels) || "+
				"(has(object.metadata.labels) && 'team' in object.metadata.labels && object.metadata.labels['team'] == oldObject.metadata.labels['team'])",
				"the team label is immutable")))},
		requests: []*parityRequest{
			update("update-team-changed", trainJob(1, "team=a"), trainJob(1, "team=b"), "transition-labels"),
			update("update-team-removed", trainJob(1, "team=a"), trainJob(1), "transition-labels"),
			update("update-team-kept", trainJob(1, "team=a"), trainJob(1, "team=a", "env=dev")),
			update("update-team-added", trainJob(1), trainJob(1, "team=a")),
		}})

	// Many policies ranging all() and exists() over one list — the
	// TrainJob's args — each within its own budget, over one 10M together.
	// They have no selectors (the old engine combined only selector-free
	// policies into one program, and the verdict then depended on whether
	// that program was ready), so this case is fenced by a matchCondition on
	// the request's namespace instead of a namespaceSelector.
	var many []*shepherdv1alpha1.WorkloadPolicy
	var manyNames []string
	for i := 1; i <= manyAll+manyExists; i++ {
		name := fmt.Sprintf("many-%02d", i)
		many = append(many, policy(name, validations(validate(manyExpression(i), "the args are not allowed"))))
		manyNames = append(manyNames, name)
	}
	add(&parityCase{name: manyCase, fenceByCondition: true, policies: many, requests: []*parityRequest{
		create("create-big", bigTrainJob(false)),
		create("create-big-bad", bigTrainJob(true), manyNames...),
	}})
	return cases
}

// fixture is every parity case set up once for the package: namespaces,
// stored objects of the UPDATE requests, the exported VAPs (enforced), the
// offline chains, and the WorkloadPolicies compiled into the webhook.
type fixture struct {
	runtime *unstructured.Unstructured
	cases   []*preparedCase
	byName  map[string]*preparedCase
}

type preparedCase struct {
	*parityCase
	// scoped are the case's policies fenced into its namespaces.
	scoped []*shepherdv1alpha1.WorkloadPolicy
	// lookups are what the offline chain's lookups answer from: the
	// runtime and the case's phase=vap namespaces.
	lookups  []runtime.Object
	chain    *webhook.Chain
	requests []*preparedRequest
}

type preparedRequest struct {
	*parityRequest
	// ns and stored are, per phase, the request's namespace and (UPDATE)
	// the stored object.
	ns     map[string]string
	stored map[string]*unstructured.Unstructured
}

var (
	fixtureOnce sync.Once
	theFixture  *fixture
)

// parityFixture sets the cases up on the first call.
func parityFixture(t *testing.T) *fixture {
	t.Helper()
	fixtureOnce.Do(func() { theFixture = setupFixture(t) })
	if theFixture == nil {
		t.Fatal("setting up the parity cases failed in an earlier test")
	}
	return theFixture
}

func setupFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	serving(t)
	f := &fixture{runtime: ensureRuntime(t), byName: map[string]*preparedCase{}}

	for _, c := range parityCases() {
		pc := &preparedCase{parityCase: c, lookups: []runtime.Object{f.runtime}}
		for _, p := range c.policies {
			pc.scoped = append(pc.scoped, scoped(p, c.name, c.fenceByCondition))
		}
		for _, r := range c.requests {
			pr := &preparedRequest{parityRequest: r, ns: map[string]string{}, stored: map[string]*unstructured.Unstructured{}}
			for _, phase := range []string{phaseVAP, phaseWebhook} {
				labels := map[string]string{labelCase: c.name, labelPhase: phase}
				for k, v := range r.nsLabels {
					labels[k] = v
				}
				ns := newNamespace(t, c.name, labels)
				pr.ns[phase] = ns.Name
				if phase == phaseVAP {
					pc.lookups = append(pc.lookups, ns)
				}
			}
			pc.requests = append(pc.requests, pr)
		}
		f.cases = append(f.cases, pc)
		f.byName[c.name] = pc
	}

	// The webhook is called, and its caches hold the runtime (V-TJ-3) and
	// every namespace's labels, before anything is asked of it.
	control := newNamespace(t, "parity-control", map[string]string{labelPhase: phaseWebhook})
	testkit.Eventually(t, timeout, "shepherd's webhook admits a plain TrainJob", func() (bool, string) {
		err := env.Client.Create(ctx, named(trainJob(1), "plain", control.Name), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
	zeroDeadline := named(trainJob(1), "zero-deadline", control.Name)
	_ = unstructured.SetNestedField(zeroDeadline.Object, int64(0), "spec", "activeDeadlineSeconds")
	corpus.ShepherdCauses(t, env.Client.Create(ctx, zeroDeadline, client.DryRunAll))
	probe := probePolicy()
	if err := env.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	if cond, _ := policyStatus(t, probe.Name); cond.Status != metav1.ConditionTrue {
		t.Fatalf("the probe policy is not active: %+v", cond)
	}
	for _, pc := range f.cases {
		for _, pr := range pc.requests {
			ns := pr.ns[phaseWebhook]
			testkit.Eventually(t, timeout, "shepherd's webhook sees the labels of namespace "+ns, func() (bool, string) {
				err := env.Client.Create(ctx, named(trainJob(1, labelProbe+"=yes"), "probe", ns), client.DryRunAll)
				return err != nil && strings.Contains(err.Error(), probe.Name+": "), fmt.Sprint(err)
			})
		}
	}

	// The stored objects of UPDATE requests, before any case's policy
	// exists (some policies would deny them).
	for _, pc := range f.cases {
		for _, pr := range pc.requests {
			if pr.old == nil {
				continue
			}
			for _, phase := range []string{phaseVAP, phaseWebhook} {
				stored := named(pr.old, pr.name, pr.ns[phase])
				if err := env.Client.Create(ctx, stored); err != nil {
					t.Fatalf("%s/%s: creating the stored object (%s): %v", pc.name, pr.name, phase, err)
				}
				pr.stored[phase] = stored
			}
		}
	}

	// (b) the offline chains, and (a) their export on the apiserver.
	for _, pc := range f.cases {
		pc.chain = seedChain(t, pc.lookups...)
		for _, p := range pc.scoped {
			if errs := pc.chain.SetPolicy(p); len(errs) > 0 {
				t.Fatalf("%s: WorkloadPolicy %s does not compile: %v", pc.name, p.Name, errs.ToAggregate())
			}
		}
		vaps, bindings := exportPolicies(t, pc.chain, pc.scoped)
		createVAPs(t, vaps, bindings)
	}
	waitVAPsActive(t)

	// (c) the same policies in the cluster, compiled into the webhook.
	for _, pc := range f.cases {
		for _, p := range pc.scoped {
			if err := env.Client.Create(ctx, p.DeepCopy()); err != nil {
				t.Fatalf("creating WorkloadPolicy %s: %v", p.Name, err)
			}
		}
	}
	for _, pc := range f.cases {
		for _, p := range pc.scoped {
			if cond, _ := policyStatus(t, p.Name); cond.Status != metav1.ConditionTrue {
				t.Fatalf("WorkloadPolicy %s is not active in the webhook: %s: %s", p.Name, cond.Reason, cond.Message)
			}
		}
	}
	return f
}

// probePolicy denies TrainJobs labelled probe=yes in phase=webhook
// namespaces: a denial with its message proves the webhook read the
// namespace's labels (a namespace it does not know yet would not match).
func probePolicy() *shepherdv1alpha1.WorkloadPolicy {
	return policy("parity-probe",
		objectSelector(labelReq(labelProbe, metav1.LabelSelectorOpIn, "yes")),
		namespaceSelector(labelReq(labelPhase, metav1.LabelSelectorOpIn, phaseWebhook)),
		validations(validate("false", "the webhook sees the namespace")))
}

// named is a copy of u with a name and namespace.
func named(u *unstructured.Unstructured, name, ns string) *unstructured.Unstructured {
	u = u.DeepCopy()
	u.SetName(name)
	u.SetNamespace(ns)
	return u
}

// verdict is one answer to a request: allowed, or denied by rules (the
// policies the denial names, sorted, each once) with messages.
type verdict struct {
	allowed  bool
	rules    []string
	messages []string
}

func (v verdict) String() string {
	if v.allowed {
		return "allowed"
	}
	return fmt.Sprintf("DENIED by %v: %q", v.rules, v.messages)
}

func (v verdict) equal(o verdict) bool {
	return v.allowed == o.allowed && slices.Equal(v.rules, o.rules) && slices.Equal(v.messages, o.messages)
}

func (v verdict) says(part string) bool {
	for _, m := range v.messages {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}

func sortedSet(list []string) []string {
	out := slices.Clone(list)
	sort.Strings(out)
	return slices.Compact(out)
}

// viaAPIServer sends the request (dry-run) into the request's namespace of
// phase and returns the apiserver's answer.
func (pr *preparedRequest) viaAPIServer(phase string) error {
	ctx := context.Background()
	obj := named(pr.object, pr.name, pr.ns[phase])
	if pr.old != nil {
		obj.SetResourceVersion(pr.stored[phase].GetResourceVersion())
		return env.Client.Update(ctx, obj, client.DryRunAll)
	}
	return env.Client.Create(ctx, obj, client.DryRunAll)
}

// vapVerdict reads the apiserver's answer in a phase=vap namespace: a
// denial names the one exported policy that denied first.
func (pc *preparedCase) vapVerdict(t *testing.T, err error) verdict {
	t.Helper()
	if err == nil {
		return verdict{allowed: true}
	}
	name, ok := corpus.DenyingPolicy(err)
	if !ok {
		t.Fatalf("denied, but not by an exported policy: %v", err)
	}
	rule := "unexpected policy " + name
	for _, p := range pc.policies {
		if celrules.PolicyName(p.Name, celrules.SourcePolicy) == name {
			rule = p.Name
		}
	}
	return verdict{rules: []string{rule}, messages: []string{err.Error()}}
}

// offlineVerdict is the chain's answer to the request in its phase=vap
// namespace, as `shepherd check` gives it.
func (pc *preparedCase) offlineVerdict(t *testing.T, chain *webhook.Chain, pr *preparedRequest) verdict {
	t.Helper()
	var old *unstructured.Unstructured
	if pr.old != nil {
		old = pr.stored[phaseVAP]
	}
	// The object as the apiserver hands it to admission (and `shepherd
	// check` judges it): pruned and defaulted by the CRD's schema, as the
	// stored old object is.
	obj := named(pr.object, pr.name, pr.ns[phaseVAP])
	chain.Schemas().Prune(obj.GroupVersionKind(), obj.Object)
	v := chain.Admit(context.Background(), request(t, pr.operation(), obj, old))
	out := verdict{allowed: v.Allowed}
	for _, viol := range v.Violations {
		if viol.Action == webhook.ActionDeny {
			out.rules = append(out.rules, viol.Rule)
			out.messages = append(out.messages, viol.Message)
		}
	}
	out.rules = sortedSet(out.rules)
	sort.Strings(out.messages)
	return out
}

// webhookVerdict reads the apiserver's answer in a phase=webhook namespace:
// shepherd's denial lists causes by message, attributed to the policies
// whose names they carry.
func (pc *preparedCase) webhookVerdict(t *testing.T, err error) verdict {
	t.Helper()
	if err == nil {
		return verdict{allowed: true}
	}
	out := verdict{}
	for _, c := range corpus.ShepherdCauses(t, err) {
		out.messages = append(out.messages, c.Message)
		named := false
		for _, p := range pc.policies {
			if mentions(c.Message, p.Name) {
				out.rules = append(out.rules, p.Name)
				named = true
			}
		}
		if !named {
			out.rules = append(out.rules, "unattributed: "+c.Message)
		}
	}
	out.rules = sortedSet(out.rules)
	sort.Strings(out.messages)
	return out
}

// mentions reports whether msg names the policy as a whole word.
func mentions(msg, name string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(msg)
}

func TestWorkloadPolicyParity(t *testing.T) {
	f := parityFixture(t)
	for _, pc := range f.cases {
		t.Run(pc.name, func(t *testing.T) {
			for _, pr := range pc.requests {
				t.Run(pr.name, func(t *testing.T) { pc.compare(t, pr) })
			}
		})
	}
}

// compare asks the three and checks they agree with each other and with
// the expected verdict.
func (pc *preparedCase) compare(t *testing.T, pr *preparedRequest) {
	a := pc.vapVerdict(t, pr.viaAPIServer(phaseVAP))
	b := pc.offlineVerdict(t, pc.chain, pr)
	c := pc.webhookVerdict(t, pr.viaAPIServer(phaseWebhook))
	want := verdict{allowed: len(pr.deniedBy) == 0, rules: sortedSet(pr.deniedBy)}
	all := fmt.Sprintf("%s %s:\n  exported VAP:   %s\n  shepherd check: %s\n  webhook:        %s\n  expected:       %s",
		pr.operation(), pr.name, a, b, c, want)
	if a.allowed != want.allowed {
		t.Errorf("the apiserver with the exported policies does not give the verdict the case expects (the case is wrong):\n%s", all)
	}
	if b.allowed != a.allowed {
		t.Errorf("shepherd check and the exported VAP disagree:\n%s", all)
	}
	if c.allowed != a.allowed {
		t.Errorf("shepherd's webhook and the exported VAP disagree:\n%s", all)
	}
	// The apiserver reports only the first policy that denied.
	if !a.allowed && !want.allowed && !slices.Contains(want.rules, a.rules[0]) {
		t.Errorf("the exported VAP's denial names another policy:\n%s", all)
	}
	if !b.allowed && !want.allowed && !slices.Equal(b.rules, want.rules) {
		t.Errorf("shepherd check's denial names other rules:\n%s", all)
	}
	if !c.allowed && !want.allowed && !slices.Equal(c.rules, want.rules) {
		t.Errorf("shepherd's webhook's denial names other rules:\n%s", all)
	}
	if pr.message != "" {
		for _, v := range []struct {
			who string
			v   verdict
		}{{"the exported VAP", a}, {"shepherd check", b}, {"the webhook", c}} {
			if !v.v.allowed && !v.v.says(pr.message) {
				t.Errorf("%s's denial does not say %q:\n%s", v.who, pr.message, all)
			}
		}
	}
}
