// Package vap proves that a rule gives the same verdict as an exported
// ValidatingAdmissionPolicy on a real kube-apiserver, in `shepherd check`
// (the offline chain) and in shepherd's webhook — and that the defaults
// exported as MutatingAdmissionPolicies give the object `check` gives
// (map_parity_test.go).
//
// The built-in rules: exported and applied with shepherd's CRDs and no
// webhook, they are accepted, type-check clean against the apiserver's
// published schemas (with the apiserver's own type checker, the one that
// fills status.typeChecking), and give every exportable corpus case the
// verdict (and warnings) `shepherd check` gives.
//
// Admins' WorkloadPolicies: each case (objectSelector, namespaceSelector,
// budgets, matchConditions, failurePolicy, messageExpression, transition
// rules) is answered by its exported VAPs, by the offline chain and by
// `shepherd serve` (its webhook configurations registered, the policies
// created in the cluster), and the three must agree on the verdict and the
// policy that denied; the same request gives the same verdict on every
// evaluation; policies that could never fire are refused. One control plane
// and one serve process carry every case, each fenced into namespaces of
// its own (fixture_test.go).
package vap

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	mutating, validating, err := phasedWebhooks()
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	cluster.RunMain(m, cluster.Options{
		CRDs: cluster.SeedCRDs,
		Webhooks: envtest.WebhookInstallOptions{
			MutatingWebhooks:   mutating,
			ValidatingWebhooks: validating,
			LocalServingHost:   "127.0.0.1",
		},
	}, &env, func(*cluster.Cluster) (cluster.Teardown, error) {
		// serve starts with the first test that needs it (served).
		return func(failed bool) error {
			if served == nil {
				return nil
			}
			return served.Teardown(failed)
		}, nil
	})
}

// goValidations are the validation rules that are Go checks: the parity
// chain runs without them, as the apiserver has no policy for them.
var goValidations = []string{"V-TJ-3", "V-TJ-4", "V-TR-7", "V-PCLQ-1"}

func isGoValidation(rule string) bool {
	for _, r := range goValidations {
		if r == rule {
			return true
		}
	}
	return false
}

func TestExportedPoliciesMatchCheck(t *testing.T) {
	ctx := context.Background()
	exportChain, err := webhook.NewChain(webhook.ChainOptions{Rules: seedcrds.Config(celrules.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	vaps, bindings := exportChain.Engine().Export()
	if len(vaps) == 0 {
		t.Fatal("nothing exported")
	}
	t.Cleanup(func() {
		for i := range vaps {
			_ = env.Client.Delete(ctx, bindings[i])
			_ = env.Client.Delete(ctx, vaps[i])
		}
	})
	for i := range vaps {
		if err := env.Client.Create(ctx, vaps[i].DeepCopy()); err != nil {
			t.Fatalf("the apiserver rejected policy %s: %v", vaps[i].Name, err)
		}
		if err := env.Client.Create(ctx, bindings[i].DeepCopy()); err != nil {
			t.Fatalf("the apiserver rejected binding %s: %v", bindings[i].Name, err)
		}
	}

	t.Run("type-check clean", func(t *testing.T) { env.TypeCheckVAPs(t, vaps) })

	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	ran := 0
	for i := range cases {
		cs := &cases[i]
		if isGoValidation(cs.Rule) {
			continue
		}
		ran++
		t.Run(cs.Name, func(t *testing.T) {
			// Each case has objects and a client (its warnings) of its own.
			t.Parallel()
			c, warn := env.WarningsClient(t)
			parity(t, c, warn, ns, cs)
		})
	}
	if ran < 40 {
		t.Fatalf("only %d corpus cases are exportable: the corpus lost its cases", ran)
	}
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// parity runs one case through the chain (without the Go-only validations)
// and through the apiserver (the chain's defaulted object, as the mutating
// webhook would hand it on), and compares verdicts and warnings.
func parity(t *testing.T, c client.Client, warn *cluster.Warnings, ns string, cs *corpus.Case) {
	ctx := context.Background()
	name := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(cs.Name), "-"), "-")
	rename := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u = u.DeepCopy()
		u.SetName(name)
		if u.GetNamespace() != "" {
			u.SetNamespace(ns)
		}
		return u
	}
	objs := make([]runtime.Object, 0, len(cs.Context))
	for _, o := range cs.Context {
		objs = append(objs, o)
	}
	cfg := cs.Config
	cfg.DisabledRules = append(append([]string{}, cfg.DisabledRules...), goValidations...)
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, !cs.NoWorkloadAPI), Rules: seedcrds.Config(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	obj := rename(cs.Object)
	var old *unstructured.Unstructured
	if cs.OldObject != nil {
		old = rename(cs.OldObject)
	}
	v := chain.Admit(ctx, request(t, cs.OperationOrDefault(), obj, old))
	submitted := &unstructured.Unstructured{Object: v.Object}
	if submitted.Object == nil {
		t.Fatalf("the chain returned no object: %+v", v)
	}
	wantPolicies := map[string]bool{}
	for _, viol := range v.Violations {
		if viol.Action == webhook.ActionWarn {
			wantPolicies[celrules.PolicyName(viol.Rule, celrules.SourceBuiltin)] = true
		}
	}

	if old != nil {
		// The stored object is what the webhook defaulted at its creation.
		stored := old.DeepCopy()
		dv := chain.Default(ctx, request(t, "CREATE", stored, nil))
		stored = &unstructured.Unstructured{Object: dv.Object}
		if err := c.Create(ctx, stored); err != nil {
			t.Fatalf("creating the old object: %v", err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, stored) })
		submitted.SetResourceVersion(stored.GetResourceVersion())
	}
	attempt := func() (allowed bool, gotPolicies map[string]bool, err error) {
		warn.Take()
		try := submitted.DeepCopy()
		if old != nil {
			err = c.Update(ctx, try, client.DryRunAll)
		} else {
			err = c.Create(ctx, try, client.DryRunAll)
		}
		gotPolicies = map[string]bool{}
		for _, w := range warn.Take() {
			if m := policyInWarning.FindStringSubmatch(w); m != nil {
				gotPolicies[m[1]] = true
			}
		}
		return err == nil, gotPolicies, err
	}
	var gotAllowed bool
	var gotPolicies map[string]bool
	var lastErr error
	match := func() bool {
		return gotAllowed == v.Allowed && fmt.Sprint(keys(gotPolicies)) == fmt.Sprint(keys(wantPolicies))
	}
	if !v.Allowed || len(wantPolicies) > 0 {
		// Bindings take effect asynchronously: poll until the policy acts.
		_ = testkit.Poll(250*time.Millisecond, 60*time.Second, func(context.Context) (bool, error) {
			gotAllowed, gotPolicies, lastErr = attempt()
			return match(), nil
		})
	} else {
		gotAllowed, gotPolicies, lastErr = attempt()
	}
	if gotAllowed != v.Allowed {
		t.Fatalf("apiserver allowed=%v (error: %v), shepherd check allowed=%v (violations %+v)", gotAllowed, lastErr, v.Allowed, v.Violations)
	}
	if !v.Allowed && !strings.Contains(lastErr.Error(), "ValidatingAdmissionPolicy 'shepherd-") {
		t.Errorf("denied, but not by a shepherd policy: %v", lastErr)
	}
	if !match() {
		t.Errorf("policies warning in the apiserver %v, shepherd check %v", keys(gotPolicies), keys(wantPolicies))
	}
}

var policyInWarning = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'`)

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func request(t *testing.T, op string, obj, old *unstructured.Unstructured) *webhook.Request {
	t.Helper()
	gvk := obj.GroupVersionKind()
	req := &webhook.Request{
		Operation: admissionv1.Operation(op),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: obj.GetNamespace(),
		Name:      obj.GetName(),
	}
	var err error
	if req.Object, err = json.Marshal(obj.Object); err != nil {
		t.Fatal(err)
	}
	if old != nil {
		if req.OldObject, err = json.Marshal(old.Object); err != nil {
			t.Fatal(err)
		}
	}
	return req
}
