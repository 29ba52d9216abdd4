package app

import (
	"encoding/json"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
)

func TestExportVAPWritesPolicyAndBindingPerExportableRule(t *testing.T) {
	dir := t.TempDir()
	pol := writeFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
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
	ms, err := parseManifests("stdout", []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]bool{}
	actions := map[string][]admissionregistrationv1.ValidationAction{}
	for _, m := range ms {
		switch m.obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			policies[m.obj.GetName()] = true
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			mustConvert(t, m.obj, &b)
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
		wantExportable := strings.HasPrefix(id, "V-") && id != "V-TJ-3" && id != "V-TJ-4" && id != "V-TR-7" && id != "V-PCLQ-1"
		if r.Exportable != wantExportable || len(r.Kinds) == 0 || r.Action == "" || (!r.Exportable && r.Reason == "") {
			t.Errorf("%s: %+v", id, r)
		}
	}
	code, out, _ = runMain("export", "rules")
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "V-PCLQ-1") {
		t.Errorf("text listing: exit %d\n%s", code, out)
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
