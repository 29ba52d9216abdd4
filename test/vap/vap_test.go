// Package vap proves that a rule gives the same verdict as an exported
// ValidatingAdmissionPolicy on a real kube-apiserver, in `shepherd check`
// (the offline chain) and in shepherd's webhook — and that the defaults
// exported as MutatingAdmissionPolicies give the object `check` gives
// (map_parity_test.go).
//
// The built-in rules: exported as ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies and applied with shepherd's CRDs and no
// webhook, they are accepted, type-check clean against the apiserver's
// published schemas (with the apiserver's own type checker, the one that
// fills status.typeChecking), and give every corpus case of an exported rule
// the verdict (and warnings) `shepherd check` gives (corpus.ReplayAll).
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
	"os"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
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

// TestExportedPoliciesMatchCheck: the ValidatingAdmissionPolicies and
// MutatingAdmissionPolicies `shepherd export` writes, applied alone (no
// webhook answers these namespaces) with shepherd's seed-shaped CRDs, are
// accepted, type-check clean, and give every corpus case of an exported rule
// the verdict and warnings `shepherd check` gives with the rules they do not
// carry switched off (the Go checks and D-WL-1, which need lookups, and a
// default with nothing to do in the default configuration): the
// parity suite's "policies alone × seed CRDs" (corpus.ReplayAll, compared
// by rule as in the native mode). test/webhook, test/interop and test/native
// replay the corpus in the other admission modes and CRD shapes.
func TestExportedPoliciesMatchCheck(t *testing.T) {
	ctx := context.Background()
	rules := seedcrds.Config(celrules.Config{})
	exportChain, err := webhook.NewChain(webhook.ChainOptions{Rules: rules})
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
	maps, mapBindings, notExported, err := celrules.ExportDefaults(rules)
	if err != nil {
		t.Fatal(err)
	}
	set := "replay-" + rand.String(5)
	createMAPs(t, env, set, maps, mapBindings)

	t.Run("type-check clean", func(t *testing.T) { env.TypeCheckVAPs(t, vaps) })
	waitVAPsActive(t)
	waitMAPsActive(t, env)

	exported := sets.New[string]()
	for _, p := range vaps {
		exported.Insert(corpus.PolicyRule(p.Name))
	}
	for _, p := range maps {
		exported.Insert(corpus.PolicyRule(p.Name))
	}
	builtin, err := webhook.BuiltinRuleIDs()
	if err != nil {
		t.Fatal(err)
	}
	rules.DisabledRules = sets.List(sets.New(builtin...).Difference(exported))
	why := map[string]string{}
	for _, n := range notExported {
		why[n.ID] = n.Reason
	}
	admit := corpus.AdmitWith(rules)
	var ran atomic.Int32
	corpus.ReplayAll(t, corpus.Suite{
		Form:    "by field, the exported policies alone",
		Cluster: env,
		// The MutatingAdmissionPolicies bind namespaces labelled with
		// their set only (createMAPs).
		Namespace:        func(t *testing.T) string { return mapNamespace(t, env, set) },
		Timeout:          time.Minute,
		FieldValidations: []string{metav1.FieldValidationStrict},
		Options: func(_ *corpus.Case, fieldValidation string) corpus.ReplayOptions {
			return corpus.ReplayOptions{Form: corpus.SeedForm, FieldValidation: fieldValidation, Admit: admit, Native: corpus.PoliciesAlone}
		},
		Skip: func(c *corpus.Case) string {
			if !exported.Has(c.Rule) {
				if r := why[c.Rule]; r != "" {
					return c.Rule + " is not exported: " + r
				}
				return c.Rule + " is not exported: it is Go (it looks objects up), which the webhook keeps"
			}
			ran.Add(1)
			return ""
		},
	})
	if ran.Load() < 40 {
		t.Fatalf("only %d corpus cases are exportable: the corpus lost its cases", ran.Load())
	}
	t.Logf("rules not exported, switched off in the chain: %v", rules.DisabledRules)
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
