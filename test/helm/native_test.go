package helm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/install"
)

// TestNativePoliciesAreDeployCopy: the chart's admission policies are
// exactly deploy/native's (make manifests generates both with `shepherd
// export` and copies them).
func TestNativePoliciesAreDeployCopy(t *testing.T) {
	for chartFile, deployFile := range map[string]string{
		"native-validating-policies.yaml": "validating-policies.yaml",
		"native-mutating-policies.yaml":   "mutating-policies.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(install.Dir("native"), deployFile))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir(), "files", chartFile))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/shepherd/files/%s differs from deploy/native/%s (%v): run make manifests", chartFile, deployFile, err)
		}
	}
}

// TestNativeElsewhere: in another namespace, with cert-manager and other
// webhook values, the native mode's webhooks, policy bindings and RBAC
// follow the values — the same narrowed webhooks, every binding and
// webhook leaving out the configured namespaces and the release's, the
// token Secret named by the value — and the webhook mode's chart output
// has none of the native objects.
func TestNativeElsewhere(t *testing.T) {
	_, objs := render(t, valueSetNamed(t, "native-elsewhere"))
	excluded := []string{"kube-system", "gpu-operator", customNS}

	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", certs.DefaultMutatingWebhook)
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "shepherd")
	var names []string
	check := func(name string, cc admissionregistrationv1.WebhookClientConfig, fp *admissionregistrationv1.FailurePolicyType, timeout *int32,
		conds []admissionregistrationv1.MatchCondition) {
		names = append(names, name)
		if cc.Service == nil || cc.Service.Namespace != customNS || cc.CABundle != nil {
			t.Errorf("webhook %s clientConfig %+v: want the Service in %s and no caBundle", name, cc, customNS)
		}
		if *fp != admissionregistrationv1.Ignore || *timeout != 10 {
			t.Errorf("webhook %s: failurePolicy %s, timeout %d; want the values' Ignore, 10", name, *fp, *timeout)
		}
		// The WorkloadPolicy webhook has nothing to narrow: every policy
		// is checked.
		if len(conds) == 0 && name != api.PolicyWebhookName {
			t.Errorf("webhook %s has no matchConditions: it is not narrowed", name)
		}
	}
	for _, w := range mwc.Webhooks {
		check(w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, w.MatchConditions)
		if got := w.NamespaceSelector.MatchExpressions[0].Values; !slices.Equal(got, excluded) {
			t.Errorf("webhook %s excludes %v, want %v", w.Name, got, excluded)
		}
	}
	for _, w := range vwc.Webhooks {
		check(w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, w.MatchConditions)
		if w.Name == api.PolicyWebhookName {
			continue // WorkloadPolicies are cluster-scoped: no namespaceSelector
		}
		if got := w.NamespaceSelector.MatchExpressions[0].Values; !slices.Equal(got, excluded) {
			t.Errorf("webhook %s excludes %v, want %v", w.Name, got, excluded)
		}
	}
	want := []string{"default.shepherd.dev", "trainjobs.validate.shepherd.dev", "runtimes.validate.shepherd.dev", "grove.validate.shepherd.dev", api.PolicyWebhookName}
	if !slices.Equal(names, want) {
		t.Errorf("webhooks %v, want %v", names, want)
	}
	for _, c := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		name := "shepherd"
		if c == "MutatingWebhookConfiguration" {
			name = certs.DefaultMutatingWebhook
		}
		if a := install.Find(objs, c, name)[0].GetAnnotations()["cert-manager.io/inject-ca-from"]; a != customNS+"/shepherd-webhook" {
			t.Errorf("%s inject-ca-from %q", c, a)
		}
	}

	bindings := 0
	for _, o := range objs {
		if !strings.HasSuffix(o.GetKind(), "AdmissionPolicyBinding") {
			continue
		}
		bindings++
		got, _, _ := unstructuredStrings(o.Object, "spec", "matchResources", "namespaceSelector", "matchExpressions")
		if !slices.Equal(got, excluded) {
			t.Errorf("%s %s leaves out %v, want %v", o.GetKind(), o.GetName(), got, excluded)
		}
		if o.GetLabels()["shepherd.dev/rule"] == "" || o.GetLabels()["app.kubernetes.io/instance"] != "shepherd" {
			t.Errorf("%s %s labels %v: want the export's rule label and the chart's", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
	if bindings < 20 {
		t.Errorf("%d policy bindings rendered, want every exported rule's", bindings)
	}

	d := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--admission-mode=native") || !slices.Contains(args, "--audit-sink-token-file=/etc/shepherd/audit-sink/token") {
		t.Errorf("args %v: want the native mode and the token file", args)
	}
	found := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "audit-token" && v.Secret.Optional != nil && *v.Secret.Optional {
			found = true
		}
	}
	if !found {
		t.Errorf("no optional volume of the Secret audit-token: %+v", d.Spec.Template.Spec.Volumes)
	}
	if len(install.Find(objs, "ClusterRole", "shepherd-native")) != 1 {
		t.Error("no ClusterRole shepherd-native: serve cannot export WorkloadPolicies")
	}

	// The webhook mode renders none of it.
	_, def := render(t, valueSetNamed(t, "defaults"))
	for _, o := range def {
		if strings.Contains(o.GetKind(), "AdmissionPolicy") || o.GetName() == "shepherd-native" {
			t.Errorf("the default values render %s %s", o.GetKind(), o.GetName())
		}
	}
	dd := typed[appsv1.Deployment](t, def, "Deployment", "shepherd")
	if slices.ContainsFunc(dd.Spec.Template.Spec.Containers[0].Args, func(a string) bool {
		return strings.HasPrefix(a, "--admission-mode") || strings.HasPrefix(a, "--audit-sink")
	}) {
		t.Errorf("the default values pass native flags: %v", dd.Spec.Template.Spec.Containers[0].Args)
	}
}

// unstructuredStrings reads the values of the first match expression at
// path.
func unstructuredStrings(obj map[string]any, path ...string) ([]string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	exprs, _ := cur.([]any)
	if len(exprs) == 0 {
		return nil, false, nil
	}
	vals, _ := exprs[0].(map[string]any)["values"].([]any)
	var out []string
	for _, v := range vals {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out, true, nil
}
