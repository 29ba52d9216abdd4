package vap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// The WorkloadPolicy cases share one control plane with the corpus parity
// test and with each other, so every one is fenced in by labels:
//
//   - labelCase scopes a case's policies: each gets the namespaceSelector
//     term labelCase=case (added to whatever selector it has; see scoped
//     for the one case fenced by a matchCondition instead), the same policy
//     in all three places — exported as a VAP, in the offline chain, and
//     created in the cluster for the webhook.
//   - labelPhase keeps the exported VAPs and the webhook apart: a case's
//     namespaces come in pairs, one per phase; the exported bindings are
//     narrowed to phase=vap and shepherd's webhook configurations to
//     phase=webhook, so a request meets either the VAPs or the webhook,
//     never both.
const (
	labelCase    = "parity.shepherd.dev/case"
	labelPhase   = "parity.shepherd.dev/phase"
	labelProbe   = "parity.shepherd.dev/probe"
	labelCanary  = "parity.shepherd.dev/canary"
	phaseVAP     = "vap"
	phaseWebhook = "webhook"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

// runtimeName is the ClusterTrainingRuntime every case's TrainJob refers to
// (shepherd's V-TJ-3 wants it to exist).
const runtimeName = "parity-runtime"

// phasedWebhooks reads shepherd's webhook configurations (deploy/webhook)
// and narrows them for this suite: only namespaces labelled phase=webhook
// (beside the configurations' own kube-system and shepherd-system
// exclusion), and no cluster-scoped resources, which a namespaceSelector
// cannot fence off — the corpus parity test creates ClusterTrainingRuntimes
// that must meet the exported VAPs alone.
func phasedWebhooks() ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	path := filepath.Join(cluster.RepoRoot(), "deploy", "webhook", "webhooks.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	phase := metav1.LabelSelectorRequirement{Key: labelPhase, Operator: metav1.LabelSelectorOpIn, Values: []string{phaseWebhook}}
	narrow := func(sel **metav1.LabelSelector, rules []admissionregistrationv1.RuleWithOperations) {
		if *sel == nil {
			*sel = &metav1.LabelSelector{}
		}
		(*sel).MatchExpressions = append((*sel).MatchExpressions, phase)
		for i := range rules {
			rules[i].Resources = slices.DeleteFunc(rules[i].Resources, func(r string) bool { return r == "clustertrainingruntimes" })
		}
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, m); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			for i := range m.Webhooks {
				narrow(&m.Webhooks[i].NamespaceSelector, m.Webhooks[i].Rules)
			}
			mutating = append(mutating, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			for i := range v.Webhooks {
				narrow(&v.Webhooks[i].NamespaceSelector, v.Webhooks[i].Rules)
			}
			validating = append(validating, v)
		}
	}
	if len(mutating) == 0 || len(validating) == 0 {
		return nil, nil, fmt.Errorf("%s: want a mutating and a validating webhook configuration", path)
	}
	return mutating, validating, nil
}

var (
	serveOnce sync.Once
	served    *cluster.Serving
	serveErr  error
)

// serving starts `shepherd serve` against the control plane once for the
// whole package (TestMain stops it) and returns it.
func serving(t *testing.T) *cluster.Serving {
	t.Helper()
	serveOnce.Do(func() {
		served, serveErr = env.Serve("--leader-elect=false", "--disable-reconcilers")
	})
	if serveErr != nil {
		t.Fatalf("starting shepherd serve: %v", serveErr)
	}
	return served
}

// newNamespace creates a namespace with a generated name and labels.
func newNamespace(t *testing.T, prefix string, labels map[string]string) *corev1.Namespace {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns
}

// scoped is p fenced into the namespaces of case c: its namespaceSelector
// (the admin's, if any) gains the term labelCase=c. byCondition fences it
// with a matchCondition on the request's namespace instead (the case's
// namespaces are named c-xxxxx), for policies that must have no selectors.
func scoped(p *shepherdv1alpha1.WorkloadPolicy, c string, byCondition bool) *shepherdv1alpha1.WorkloadPolicy {
	p = p.DeepCopy()
	if byCondition {
		p.Spec.MatchConditions = append(p.Spec.MatchConditions, shepherdv1alpha1.MatchCondition{
			Name: "parity-case", Expression: fmt.Sprintf("request.namespace.startsWith('%s-')", c),
		})
		return p
	}
	sel := p.Spec.Match.NamespaceSelector
	if sel == nil {
		sel = &metav1.LabelSelector{}
	}
	labels := map[string]string{labelCase: c}
	for k, v := range sel.MatchLabels {
		labels[k] = v
	}
	sel.MatchLabels = labels
	p.Spec.Match.NamespaceSelector = sel
	return p
}

// seedChain is the offline chain of `shepherd check` against the
// seed-shaped CRDs, its lookups answering from objs (namespaces, runtimes).
func seedChain(t *testing.T, objs ...runtime.Object) *webhook.Chain {
	t.Helper()
	chain, err := webhook.NewChain(webhook.ChainOptions{
		Lookups: webhook.NewObjectLookups(objs, true),
		Rules:   seedcrds.Config(celrules.Config{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return chain
}

// exportPolicies is what `shepherd export` writes for policies: the
// ValidatingAdmissionPolicies and bindings of those WorkloadPolicies (not of
// the built-in rules), each binding narrowed to phase=vap namespaces on top
// of whatever scope the export gives it.
func exportPolicies(t *testing.T, chain *webhook.Chain, policies []*shepherdv1alpha1.WorkloadPolicy) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range policies {
		want[celrules.PolicyName(p.Name, celrules.SourcePolicy)] = true
	}
	vaps, bindings := chain.Engine().Export()
	var outV []*admissionregistrationv1.ValidatingAdmissionPolicy
	var outB []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, v := range vaps {
		if want[v.Name] {
			outV = append(outV, v.DeepCopy())
		}
	}
	for _, b := range bindings {
		if !want[b.Spec.PolicyName] {
			continue
		}
		b = b.DeepCopy()
		if b.Spec.MatchResources == nil {
			b.Spec.MatchResources = &admissionregistrationv1.MatchResources{}
		}
		if b.Spec.MatchResources.NamespaceSelector == nil {
			b.Spec.MatchResources.NamespaceSelector = &metav1.LabelSelector{}
		}
		sel := b.Spec.MatchResources.NamespaceSelector
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: labelPhase, Operator: metav1.LabelSelectorOpIn, Values: []string{phaseVAP}})
		outB = append(outB, b)
	}
	if len(outV) != len(policies) || len(outB) != len(policies) {
		t.Fatalf("export gave %d policies and %d bindings for %d WorkloadPolicies", len(outV), len(outB), len(policies))
	}
	return outV, outB
}

// createVAPs creates policies and bindings on the apiserver.
func createVAPs(t *testing.T, vaps []*admissionregistrationv1.ValidatingAdmissionPolicy, bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := context.Background()
	for _, v := range vaps {
		if err := env.Client.Create(ctx, v.DeepCopy()); err != nil {
			t.Fatalf("the apiserver rejected exported policy %s: %v", v.Name, err)
		}
	}
	for _, b := range bindings {
		if err := env.Client.Create(ctx, b.DeepCopy()); err != nil {
			t.Fatalf("the apiserver rejected exported binding %s: %v", b.Name, err)
		}
	}
}

// waitVAPsActive returns once every ValidatingAdmissionPolicy and binding
// created before the call is enforced. The apiserver loads them
// asynchronously and reports no status for it, so a canary is created
// last: a policy denying ConfigMaps in a namespace of its own. The
// admission plugin rebuilds its policies from its informers' whole
// contents, and an informer sees objects in resourceVersion order, so
// once the canary denies, everything created before it is loaded too.
func waitVAPsActive(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	id := "parity-canary-" + rand.String(6)
	ns := newNamespace(t, "canary", map[string]string{labelCanary: id})
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: id}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        id,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelCanary: id}},
			},
		},
	}
	createVAPs(t, []*admissionregistrationv1.ValidatingAdmissionPolicy{vap}, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding})
	defer func() {
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, vap)
	}()
	testkit.Eventually(t, timeout, "the canary ValidatingAdmissionPolicy enforced", func() (bool, string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns.Name}}
		err := env.Client.Create(ctx, cm, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), id), fmt.Sprint(err)
	})
}

// policyStatus waits until the WorkloadPolicy's status describes its
// current generation (whatever the outcome) and returns its Ready
// condition: asserting on it then never waits out a timeout for a verdict
// that has already been given.
func policyStatus(t *testing.T, name string) (*metav1.Condition, *shepherdv1alpha1.WorkloadPolicy) {
	t.Helper()
	var cond *metav1.Condition
	p := &shepherdv1alpha1.WorkloadPolicy{}
	testkit.Eventually(t, timeout, "WorkloadPolicy "+name+" status of its current generation", func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return false, err.Error()
		}
		cond = meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady)
		if cond == nil || p.Status.ObservedGeneration != p.Generation || cond.ObservedGeneration != p.Generation {
			return false, fmt.Sprintf("generation %d, status %+v", p.Generation, p.Status)
		}
		return true, ""
	})
	return cond, p
}

// trainJob is a TrainJob on the suite's runtime with numNodes nodes and
// labels given as "key=value" pairs; name and namespace are set per request.
func trainJob(nodes int64, labels ...string) *unstructured.Unstructured {
	return testkit.TrainJob("", "", runtimeName, nodes).Image("docker.io/pytorch/pytorch").Labels(labels...).Obj()
}

// clusterRuntime is the runtime every TrainJob of the suite names.
func clusterRuntime() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1",
		"kind":       "ClusterTrainingRuntime",
		"metadata":   map[string]any{"name": runtimeName},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{
			map[string]any{"name": "node", "template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "node", "image": "busybox"}}}}}}},
		}}}},
	}}
}

// ensureRuntime creates the suite's ClusterTrainingRuntime unless it exists.
func ensureRuntime(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	rt := clusterRuntime()
	if err := env.Client.Create(context.Background(), rt); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the runtime: %v", err)
	}
	return clusterRuntime()
}
