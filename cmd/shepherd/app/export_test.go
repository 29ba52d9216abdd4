package app

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

func TestExportVAPWritesPolicyAndBindingPerExportableRule(t *testing.T) {
	dir := t.TempDir()
	pol := testkit.WriteFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: audit-big-jobs}
spec:
  action: Audit
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob], operations: [CREATE]}]
  validations:
  - expression: "object.spec.?trainer.?numNodes.orValue(1) <= 64"
`)
	code, out, errOut := runMain("export", "vap", "--policy", pol)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ms, err := offline.Parse("stdout", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]bool{}
	actions := map[string][]admissionregistrationv1.ValidationAction{}
	for _, m := range ms {
		switch m.Obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			policies[m.Obj.GetName()] = true
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			mustConvert(t, m.Obj, &b)
			actions[b.Spec.PolicyName] = b.Spec.ValidationActions
		}
	}
	for _, want := range []struct {
		name   string
		action admissionregistrationv1.ValidationAction
	}{
		{"shepherd-v-tj-1", admissionregistrationv1.Deny},
		{"shepherd-v-tr-2", admissionregistrationv1.Warn},
		{"shepherd-policy-audit-big-jobs", admissionregistrationv1.Audit},
	} {
		if !policies[want.name] || len(actions[want.name]) != 1 || actions[want.name][0] != want.action {
			t.Errorf("%s: policy %v, actions %v; want a policy bound with [%s]", want.name, policies[want.name], actions[want.name], want.action)
		}
	}
	for _, notExported := range []string{"shepherd-v-tj-3", "shepherd-v-tr-7", "shepherd-v-pclq-1"} {
		if policies[notExported] {
			t.Errorf("%s was exported", notExported)
		}
	}
	for _, id := range []string{"V-TJ-3", "V-TJ-4", "V-TR-7", "V-PCLQ-1"} {
		if !strings.Contains(errOut, "not exported: "+id+" ") {
			t.Errorf("stderr does not list %s as not exported:\n%s", id, errOut)
		}
	}
}

func TestExportRulesListsEveryRule(t *testing.T) {
	code, out, errOut := runMain("export", "rules", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rules []celrules.RuleInfo
	if err := json.Unmarshal([]byte(out), &rules); err != nil {
		t.Fatal(err)
	}
	byID := map[string]celrules.RuleInfo{}
	for _, r := range rules {
		byID[r.ID] = r
	}
	for _, id := range []string{"V-TJ-1", "V-TJ-2", "V-TJ-3", "V-TJ-4", "V-TR-1", "V-TR-2", "V-TR-3", "V-TR-4", "V-TR-5", "V-TR-6", "V-TR-7", "V-TR-8", "V-TR-9",
		"V-PCS-1", "V-PCS-2", "V-PCS-3", "V-PCS-4", "V-PCS-5", "V-PCS-6", "V-PCS-7", "V-PCS-8", "V-PCLQ-1", "V-JS-1", "V-JS-2", "V-JS-3", "V-JS-4", "V-JS-5",
		"D-PCS-1", "D-PCS-2", "D-PCS-3", "D-PCS-4", "D-PCS-5", "D-PCS-6", "D-JS-1", "D-JS-2", "D-WL-1"} {
		r, ok := byID[id]
		if !ok {
			t.Errorf("%s not listed", id)
			continue
		}
		// Validations export as ValidatingAdmissionPolicies, defaulters as
		// MutatingAdmissionPolicies; lookups and discovery do not export.
		wantExportable := id != "V-TJ-3" && id != "V-TJ-4" && id != "V-TR-7" && id != "V-PCLQ-1" && id != "D-WL-1"
		if r.Exportable != wantExportable || len(r.Kinds) == 0 || r.Action == "" || (!r.Exportable && r.Reason == "") {
			t.Errorf("%s: %+v", id, r)
		}
	}
	code, out, _ = runMain("export", "rules")
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "V-PCLQ-1") {
		t.Errorf("text listing: exit %d\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[0], "D-") && (f[3] == "yes") != (f[0] != "D-WL-1") {
			t.Errorf("text listing: %s", line)
		}
		if len(f) > 4 && strings.HasPrefix(f[0], "D-") && f[0] != "D-WL-1" && f[4] != "(MAP)" {
			t.Errorf("text listing does not say a defaulter exports as a MutatingAdmissionPolicy: %s", line)
		}
	}
}

// The defaulters the listing calls exportable are exactly the ones `export
// map` has a policy for: webhook's table and celrules' agree.
func TestExportableDefaultersAreTheExportedOnes(t *testing.T) {
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range chain.Rules() {
		if r.Action == "Default" && r.Exportable {
			listed = append(listed, r.ID)
		}
	}
	if !slices.Equal(listed, celrules.DefaultRuleIDs()) {
		t.Errorf("listed as exportable defaulters %v, celrules exports %v", listed, celrules.DefaultRuleIDs())
	}
}

// exportMAP runs `export map` and returns its policies and bindings by rule.
func exportMAP(t *testing.T, args ...string) (map[string]*admissionregistrationv1.MutatingAdmissionPolicy, map[string]*admissionregistrationv1.MutatingAdmissionPolicyBinding, string) {
	t.Helper()
	code, out, errOut := runMain(append([]string{"export", "map"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ms, err := offline.Parse("stdout", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]*admissionregistrationv1.MutatingAdmissionPolicy{}
	bindings := map[string]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, m := range ms {
		switch m.Obj.GetKind() {
		case "MutatingAdmissionPolicy":
			p := &admissionregistrationv1.MutatingAdmissionPolicy{}
			mustConvert(t, m.Obj, p)
			policies[p.Labels[celrules.LabelRule]] = p
		case "MutatingAdmissionPolicyBinding":
			b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			mustConvert(t, m.Obj, b)
			bindings[b.Labels[celrules.LabelRule]] = b
		default:
			t.Errorf("export map wrote a %s", m.Obj.GetKind())
		}
	}
	return policies, bindings, errOut
}

func TestExportMAPWritesAPolicyAndBindingPerDefaulter(t *testing.T) {
	// The pinned upstream schemas: D-PCS-2 does nothing there (Grove's own
	// schema), D-WL-1 needs lookups.
	policies, bindings, errOut := exportMAP(t, "--inference-termination-delay", "4h", "--namespace", "ops")
	want := []string{"D-PCS-1", "D-PCS-3", "D-PCS-4", "D-PCS-5", "D-PCS-6", "D-JS-1", "D-JS-2"}
	for _, id := range want {
		p, b := policies[id], bindings[id]
		if p == nil || b == nil || b.Spec.PolicyName != p.Name || p.Name != celrules.PolicyName(id, celrules.SourceBuiltin) {
			t.Errorf("%s: policy %v, binding %v", id, p, b)
			continue
		}
		if ns := b.Spec.MatchResources.NamespaceSelector.MatchExpressions; len(ns) != 1 || !slices.Equal(ns[0].Values, []string{"kube-system", "ops"}) {
			t.Errorf("%s: binding's namespaceSelector %+v", id, ns)
		}
	}
	if len(policies) != len(want) || len(bindings) != len(want) {
		t.Errorf("%d policies and %d bindings, want %d of each", len(policies), len(bindings), len(want))
	}
	// Carriers on the upstream schemas.
	if p := policies["D-PCS-1"]; p != nil && !strings.Contains(p.Spec.Mutations[0].JSONPatch.Expression, "shepherd.dev/workload-type") {
		t.Errorf("D-PCS-1 on the upstream schemas does not write the carrier: %s", p.Spec.Mutations[0].JSONPatch.Expression)
	}
	for _, id := range []string{"D-WL-1", "D-PCS-2"} {
		if !strings.Contains(errOut, "not exported: "+id+" ") {
			t.Errorf("stderr does not list %s as not exported:\n%s", id, errOut)
		}
	}

	// The seed-shaped schemas keep the seed fields, and D-PCS-2 applies.
	policies, _, errOut = exportMAP(t, "--crd", filepath.Join("..", "..", "..", "test", "seedcrds"), "--disable-rule", "D-PCS-6", "--disable-startup-policy-rewrite")
	if p := policies["D-PCS-1"]; p == nil || !strings.Contains(p.Spec.Mutations[0].JSONPatch.Expression, "'/spec/workloadType'") {
		t.Errorf("D-PCS-1 on the seed-shaped schemas does not write the field: %+v", p)
	}
	if policies["D-PCS-2"] == nil || policies["D-PCS-6"] != nil || policies["D-JS-2"] != nil || policies["D-PCS-5"] != nil {
		t.Errorf("with D-PCS-6 disabled, the rewrite off and no Inference delay: policies for %v", slices.Sorted(maps.Keys(policies)))
	}
	for _, id := range []string{"D-JS-2", "D-PCS-5"} {
		if !strings.Contains(errOut, "not exported: "+id+" ") {
			t.Errorf("stderr does not say why %s is not exported:\n%s", id, errOut)
		}
	}
	if strings.Contains(errOut, "D-PCS-6") {
		t.Errorf("a disabled rule is listed:\n%s", errOut)
	}

	if code, _, errOut := runMain("export", "map", "--inference-termination-delay", "-1m"); code != 2 || !strings.Contains(errOut, "--inference-termination-delay") {
		t.Errorf("a negative delay: exit %d, %s", code, errOut)
	}
}

func mustConvert(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
