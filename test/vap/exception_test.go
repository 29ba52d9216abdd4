package vap

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// TestExportedExceptionsExemptAsCheck: a WorkloadPolicy exported with two
// PolicyExceptions (one by namespace and object labels, one by an object
// label's absence) and an expired one is loaded by the apiserver, and
// exempts exactly the requests `shepherd check`'s chain exempts: every
// combination of an exempt or other namespace, object labels, and an
// UPDATE that removes the label (the stored object's labels count).
func TestExportedExceptionsExemptAsCheck(t *testing.T) {
	ctx := context.Background()
	rt := ensureRuntime(t)
	c := "exc-" + rand.String(5)
	policy := scoped(&shepherdv1alpha1.WorkloadPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "small-" + c},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{
			Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}}}},
			Validations: []shepherdv1alpha1.Validation{{
				Expression: "object.spec.trainer.numNodes <= 4",
				Message:    "at most 4 nodes",
			}},
		},
	}, c, false)
	now := time.Now()
	past := metav1.NewTime(now.Add(-time.Hour))
	later := metav1.NewTime(now.Add(time.Hour))
	excs := []*shepherdv1alpha1.PolicyException{
		{ObjectMeta: metav1.ObjectMeta{Name: "a-legacy-" + c}, Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:             []string{policy.Name},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"exempt": "yes"}},
			ObjectSelector:    &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "legacy", Operator: metav1.LabelSelectorOpIn, Values: []string{"true", "yes"}}}},
			Expires:           &later,
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b-untiered-" + c}, Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:          []string{policy.Name},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}, {Key: "bench", Operator: metav1.LabelSelectorOpExists}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c-expired-" + c}, Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules: []string{policy.Name}, Expires: &past,
		}},
	}
	set, err := exceptions.NewSet(excs)
	if err != nil {
		t.Fatal(err)
	}

	exemptNS := newNamespace(t, c, map[string]string{labelCase: c, labelPhase: phaseVAP, "exempt": "yes"})
	otherNS := newNamespace(t, c, map[string]string{labelCase: c, labelPhase: phaseVAP})
	chain := seedChain(t, exemptNS, otherNS, rt)
	if errs := chain.SetPolicy(policy); len(errs) > 0 {
		t.Fatal(errs)
	}
	chain.SetExceptions(set)
	vaps, bindings := exportPolicies(t, chain, []*shepherdv1alpha1.WorkloadPolicy{policy})
	if !set.ExemptVAP(policy.Name, vaps[0], now) {
		t.Fatal("the exceptions naming the policy did not rewrite its export")
	}
	if got := vaps[0].Annotations[exceptions.AnnotationExceptions]; got != excs[0].Name+","+excs[1].Name {
		t.Errorf("%s = %q; want the two exceptions in force", exceptions.AnnotationExceptions, got)
	}
	createVAPs(t, vaps, bindings)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), bindings[0])
		_ = env.Client.Delete(context.Background(), vaps[0])
	})
	waitVAPsActive(t)

	type tc struct {
		ns     string
		labels []string
		old    []string // the stored object's labels: an UPDATE
		exempt bool
	}
	cases := []tc{
		{exemptNS.Name, []string{"legacy=true"}, nil, true},
		{exemptNS.Name, []string{"legacy=yes", "tier=gold"}, nil, true},
		{exemptNS.Name, []string{"legacy=no"}, nil, false},
		{exemptNS.Name, nil, nil, false},
		{otherNS.Name, []string{"legacy=true"}, nil, false},
		{otherNS.Name, []string{"bench=1"}, nil, true},
		{otherNS.Name, []string{"bench=1", "tier=x"}, nil, false},
		{exemptNS.Name, []string{"team=a"}, []string{"legacy=true"}, true},
		{otherNS.Name, []string{"team=a"}, []string{"legacy=true"}, false},
	}
	exempted := 0
	for i, k := range cases {
		t.Run(fmt.Sprintf("%d %s %v old %v", i, strings.TrimPrefix(k.ns, c), k.labels, k.old), func(t *testing.T) {
			obj := trainJob(8, k.labels...)
			obj.SetNamespace(k.ns)
			obj.SetName(fmt.Sprintf("tj-%d", i))
			var stored *unstructured.Unstructured
			op := "CREATE"
			if k.old != nil {
				// Stored first, small enough to pass; the update grows it.
				op = "UPDATE"
				stored = trainJob(2, k.old...)
				stored.SetNamespace(k.ns)
				stored.SetName(obj.GetName())
				if err := env.Client.Create(ctx, stored); err != nil {
					t.Fatalf("creating the stored object: %v", err)
				}
				obj.SetResourceVersion(stored.GetResourceVersion())
			}
			v := chain.Validate(ctx, request(t, op, obj, stored))
			gotExempt := v.Allowed && len(v.Exempted) == 1
			if gotExempt != k.exempt {
				t.Fatalf("check: allowed %v, exempted %+v; want exempt=%v", v.Allowed, v.Exempted, k.exempt)
			}
			if !v.Allowed && len(v.Violations) != 1 {
				t.Fatalf("check: %+v; want one violation", v.Violations)
			}
			var apiErr error
			if stored != nil {
				apiErr = env.Client.Update(ctx, obj, client.DryRunAll)
			} else {
				apiErr = env.Client.Create(ctx, obj, client.DryRunAll)
			}
			if (apiErr == nil) != k.exempt {
				t.Errorf("the apiserver with the exported policy: %v; want exempt=%v as check", apiErr, k.exempt)
			}
			if apiErr != nil && !strings.Contains(apiErr.Error(), "at most 4 nodes (shepherd "+policy.Name+")") {
				t.Errorf("denied, but not by the policy: %v", apiErr)
			}
			if k.exempt {
				exempted++
			}
		})
	}
	if exempted == 0 || exempted == len(cases) {
		t.Errorf("%d of %d cases exempt: the cases lost their point", exempted, len(cases))
	}
}

// TestExportedMAPExemptsAsCheck: D-PCS-1's exported MutatingAdmissionPolicy
// rewritten for an exception by object label type-checks on the apiserver
// and leaves an exempt PodCliqueSet undefaulted, as the chain does, while
// another PodCliqueSet is defaulted.
func TestExportedMAPExemptsAsCheck(t *testing.T) {
	ctx := context.Background()
	s, err := seedcrds.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	cfg := seedcrds.Config(celrules.Config{})
	cfg.Schemas = s
	policies, bindings, _, err := celrules.ExportDefaults(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set, err := exceptions.NewSet([]*shepherdv1alpha1.PolicyException{{
		ObjectMeta: metav1.ObjectMeta{Name: "keep-type"},
		Spec:       shepherdv1alpha1.PolicyExceptionSpec{Rules: []string{"D-PCS-1"}, ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "true"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*admissionregistrationv1.MutatingAdmissionPolicy
	var bs []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	for i, p := range policies {
		if set.RuleOf(p.Name) == "D-PCS-1" {
			if ok, err := set.ExemptMAP("D-PCS-1", p, time.Now()); !ok || err != nil {
				t.Fatalf("ExemptMAP: %v, %v", ok, err)
			}
			ps, bs = append(ps, p), append(bs, bindings[i])
		}
	}
	if len(ps) != 1 {
		t.Fatalf("%d exported policies of D-PCS-1; want 1", len(ps))
	}
	id := "exc-" + rand.String(5)
	createMAPs(t, env, id, ps, bs)
	ns := mapNamespace(t, env, id)
	waitMAPsActive(t, env)

	chain := seedChain(t)
	chain.SetExceptions(set)
	for _, legacy := range []string{"true", "false"} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
			"metadata": map[string]any{"name": "pcs-" + legacy, "namespace": ns, "labels": map[string]any{"legacy": legacy}},
			"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"cliques": []any{map[string]any{
				"name": "w", "spec": map[string]any{"replicas": int64(1), "podSpec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}},
			}}}},
		}}
		v := chain.Default(ctx, request(t, "CREATE", obj, nil))
		checkTyped := hasWorkloadType(v.Object)
		got := obj.DeepCopy()
		if err := env.Client.Create(ctx, got, client.DryRunAll); err != nil {
			t.Fatalf("legacy=%s: dry-run create: %v", legacy, err)
		}
		apiTyped := hasWorkloadType(got.Object)
		if checkTyped != apiTyped || checkTyped != (legacy == "false") {
			t.Errorf("legacy=%s: workload type defaulted by check %v, by the apiserver %v; want %v", legacy, checkTyped, apiTyped, legacy == "false")
		}
	}
}

// hasWorkloadType says D-PCS-1 gave the PodCliqueSet a workload type (the
// seed field of the suite's CRDs).
func hasWorkloadType(obj map[string]any) bool {
	_, ok, _ := unstructured.NestedString(obj, "spec", "workloadType")
	return ok
}
