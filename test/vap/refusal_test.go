package vap

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// TestRefusedPolicies: a WorkloadPolicy that could never fire in the
// webhook — an operation its configurations never send (DELETE, CONNECT),
// a kind that does not exist (misspelled) — or whose fieldPath does not
// parse is refused: SetPolicy (check, export) returns an error on the field;
// kubectl apply is denied with the same errors, as 422 causes; and one
// labelled apply-unchecked is stored, with its Ready condition False,
// reason CompileError, naming the field.
func TestRefusedPolicies(t *testing.T) {
	serving(t)
	cases := []struct {
		name  string
		opt   policyOpt
		field string
	}{
		{"refused-delete", operations("DELETE"), "spec.match.resources[0].operations[0]"},
		{"refused-connect", operations("CREATE", "CONNECT"), "spec.match.resources[0].operations[1]"},
		{"refused-kind-typo", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Match.Resources[0].Kinds = []string{"Trainjob"} }, "spec.match.resources[0].kinds[0]"},
		{"refused-fieldpath", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.Validations[0].FieldPath = "spec.trainer.args[0" }, "spec.validations[0].fieldPath"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Fenced into namespaces no one has: were it accepted, it
			// must not disturb the other cases.
			p := scoped(policy(c.name, validations(maxFour), c.opt), "refused", false)
			errs := seedChain(t).SetPolicy(p)
			var onField []string
			for _, e := range errs {
				if e.Field == c.field {
					onField = append(onField, e.Error())
				}
			}
			if len(onField) == 0 {
				t.Errorf("SetPolicy: want an error on %s, got %v", c.field, errs)
			}

			ctx := context.Background()
			err := env.Client.Create(ctx, p.DeepCopy())
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusUnprocessableEntity || se.ErrStatus.Details == nil {
				t.Fatalf("applying it: want a 422 Invalid, got %v", err)
			}
			var causes, want []string
			for _, c := range se.ErrStatus.Details.Causes {
				causes = append(causes, c.Field+": "+c.Message)
			}
			for _, e := range errs {
				want = append(want, e.Field+": "+e.ErrorBody())
			}
			if diff := cmp.Diff(want, causes); diff != "" {
				t.Errorf("the denial's causes are not SetPolicy's errors (-SetPolicy +denial):\n%s", diff)
			}

			p.Labels = map[string]string{api.LabelApplyUnchecked: "true"}
			if err := env.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
			cond, live := policyStatus(t, p.Name)
			if cond.Status != metav1.ConditionFalse || cond.Reason != api.ReasonCompileError || !strings.Contains(cond.Message, c.field) {
				t.Errorf("Ready condition %s/%s %q: want False/%s naming %s (compileErrors %+v)", cond.Status, cond.Reason, cond.Message, api.ReasonCompileError, c.field, live.Status.CompileErrors)
			}
		})
	}
}

// TestUnknownNamespaceIsAnError: a policy with a namespaceSelector cannot
// be matched against a namespace that does not exist. The apiserver
// answers 404 for it; `shepherd check` denies, naming the namespace,
// rather than matching the namespace as if it had no labels.
func TestUnknownNamespaceIsAnError(t *testing.T) {
	const missing = "parity-no-such-namespace"
	tj := named(trainJob(1), "tj", missing)
	err := env.Client.Create(context.Background(), tj, client.DryRunAll)
	if !apierrors.IsNotFound(err) {
		t.Errorf("the apiserver on a TrainJob in a missing namespace: want 404, got %v", err)
	}

	// NotIn matches a namespace without the label, and the TrainJob passes
	// the validation: only the missing namespace can deny it.
	p := policy("unknown-namespace", namespaceSelector(labelReq("tier", metav1.LabelSelectorOpNotIn, "system")), validations(maxFour))
	chain := seedChain(t, ensureRuntime(t))
	if errs := chain.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	v := chain.Admit(context.Background(), request(t, "CREATE", tj, nil))
	naming := false
	for _, viol := range v.Violations {
		if viol.Action == webhook.ActionDeny && strings.Contains(viol.Message, missing) {
			naming = true
		}
	}
	if v.Allowed || !naming {
		t.Errorf("shepherd check on a TrainJob in a missing namespace: want a denial naming %s, got allowed=%v %+v", missing, v.Allowed, v.Violations)
	}
}

// TestExportedBindingsSkipExcludedNamespaces: the exported bindings leave
// out what shepherd's webhook configurations leave out — kube-system and
// shepherd's own namespace — so a policy exported as a VAP does not apply
// there either.
func TestExportedBindingsSkipExcludedNamespaces(t *testing.T) {
	ctx := context.Background()
	const caseName = "excluded-namespaces"
	labels := map[string]string{labelCase: caseName, labelPhase: phaseVAP}
	var excluded []string
	for _, name := range []string{api.SystemNamespace, api.DefaultNamespace} {
		ns := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ns); apierrors.IsNotFound(err) {
			ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := env.Client.Create(ctx, ns); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		orig := ns.DeepCopy()
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		for k, v := range labels {
			ns.Labels[k] = v
		}
		if err := env.Client.Patch(ctx, ns, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ns := &corev1.Namespace{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
				return
			}
			orig := ns.DeepCopy()
			for k := range labels {
				delete(ns.Labels, k)
			}
			_ = env.Client.Patch(context.Background(), ns, client.MergeFrom(orig))
		})
		excluded = append(excluded, name)
	}
	control := newNamespace(t, caseName, labels)

	p := scoped(policy(caseName, validations(maxFour)), caseName, false)
	chain := seedChain(t)
	if errs := chain.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	vaps, bindings := exportPolicies(t, chain, []*shepherdv1alpha1.WorkloadPolicy{p})
	createVAPs(t, vaps, bindings)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), bindings[0])
		_ = env.Client.Delete(context.Background(), vaps[0])
	})
	waitVAPsActive(t)

	dryRun := func(ns string) error {
		return env.Client.Create(ctx, named(trainJob(8), "tj", ns), client.DryRunAll)
	}
	if err := dryRun(control.Name); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Fatalf("the exported policy does not deny in an ordinary namespace: %v", err)
	}
	for _, ns := range excluded {
		if err := dryRun(ns); err != nil {
			t.Errorf("the exported policy applies in %s, which shepherd's webhooks exclude: %v", ns, err)
		}
	}
}
