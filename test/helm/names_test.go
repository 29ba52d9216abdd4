package helm_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/test/install"
)

// renamed is a value set with the names overridden, in every mode that
// renders objects of its own: cert-manager's, native mode's, the
// observability objects, the ServiceMonitor and the NetworkPolicy.
func renamed(override map[string]any, extra map[string]any) valueSet {
	vals := map[string]any{
		"metrics":       map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
		"networkPolicy": map[string]any{"enabled": true},
		"observability": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}},
	}
	for k, v := range override {
		vals[k] = v
	}
	for k, v := range extra {
		vals[k] = v
	}
	return valueSet{name: "renamed", namespace: customNS, values: vals}
}

// kept are the objects whose names do not follow the overrides, on purpose
// (_helpers.tpl says why): the CRDs, named by their group, and the native
// mode's admission policies, whose names serve maps back to rule IDs.
func kept(o *unstructured.Unstructured) bool {
	switch o.GetKind() {
	case "CustomResourceDefinition":
		return true
	case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
		return o.GetLabels()["shepherd.dev/rule"] != ""
	}
	return false
}

// TestNameOverrides (issue 33): fullnameOverride and nameOverride rename
// every object the chart renders, in every mode, and every reference
// between them follows: the ServiceAccount the pods run as and the RBAC
// binds, the roles the bindings name, the Service the webhooks call, the
// Secret, webhook configurations and Lease the RBAC allows by name, the
// cert-manager Certificate, its Secret and the inject-ca-from annotations,
// the alerts' job; and serve is told the names by flags it knows. The
// renamed objects pass Helm's linter and a server-side dry-run.
func TestNameOverrides(t *testing.T) {
	installCertManagerCRDs(t)
	ensureNamespace(t, customNS)
	for _, tc := range []struct {
		name      string
		override  map[string]any
		full      string // the names' base
		nameLabel string // app.kubernetes.io/name
	}{
		{"fullnameOverride", map[string]any{"fullnameOverride": "acme-admission"}, "acme-admission", "shepherd"},
		{"nameOverride", map[string]any{"nameOverride": "guard"}, "guard", "guard"},
		{"both", map[string]any{"nameOverride": "guard", "fullnameOverride": "acme-admission"}, "acme-admission", "guard"},
	} {
		for mode, vals := range map[string]map[string]any{
			"self-signed":  {"certificates": map[string]any{"mode": "self-signed"}},
			"cert-manager": {"certificates": map[string]any{"mode": "cert-manager"}},
			"native":       {"admission": map[string]any{"mode": "native"}},
		} {
			vs := renamed(tc.override, vals)
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				_, objs := render(t, vs)
				checkNames(t, objs, tc.full, tc.nameLabel)
				checkReferences(t, objs, tc.full)

				l := lint.All(chartDir(), vs.values, vs.namespace, false)
				for _, m := range l.Messages {
					if m.Severity > support.InfoSev {
						t.Errorf("lint: %v", m)
					}
				}
				for _, o := range objs {
					if notServedHere[o.GroupVersionKind().GroupKind()] {
						continue
					}
					if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
						client.FieldOwner("helm"), client.ForceOwnership, client.DryRunAll); err != nil {
						t.Errorf("%s rejected: %v", key(o), err)
					}
				}
			})
		}
	}
}

// checkNames: every object but the kept ones is named after full, and
// carries app.kubernetes.io/name nameLabel, as do the pods and their
// selector.
func checkNames(t *testing.T, objs []*unstructured.Unstructured, full, nameLabel string) {
	t.Helper()
	n := 0
	for _, o := range objs {
		if kept(o) {
			continue
		}
		n++
		name := o.GetName()
		if o.GetKind() == "MutatingWebhookConfiguration" {
			// It starts with "defaults." to sort before the upstream
			// defaulting webhooks.
			if want := "defaults." + full + ".shepherd.dev"; name != want {
				t.Errorf("MutatingWebhookConfiguration %q, want %q", name, want)
			}
			continue
		}
		if name != full && !strings.HasPrefix(name, full+"-") {
			t.Errorf("%s is not named after %q", key(o), full)
		}
		if got := o.GetLabels()["app.kubernetes.io/name"]; got != nameLabel {
			t.Errorf("%s has app.kubernetes.io/name %q, want %q", key(o), got, nameLabel)
		}
	}
	if n < 15 {
		t.Errorf("only %d objects checked", n)
	}
	dep := typed[appsv1.Deployment](t, objs, "Deployment", full)
	for what, labels := range map[string]map[string]string{"selector": dep.Spec.Selector.MatchLabels, "pod": dep.Spec.Template.Labels} {
		if labels["app.kubernetes.io/name"] != nameLabel {
			t.Errorf("Deployment %s labels %v, want app.kubernetes.io/name %s", what, labels, nameLabel)
		}
	}
}

// checkReferences: every name one object gives another is that object's.
func checkReferences(t *testing.T, objs []*unstructured.Unstructured, full string) {
	t.Helper()
	svcName := full + "-webhook"
	svc := typed[corev1.Service](t, objs, "Service", svcName)
	sa := typed[corev1.ServiceAccount](t, objs, "ServiceAccount", full)
	dep := typed[appsv1.Deployment](t, objs, "Deployment", full)
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("pods run as %q, the ServiceAccount is %q", pod.ServiceAccountName, sa.Name)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selects %s=%s, the pods are labelled %v", k, v, dep.Spec.Template.Labels)
		}
	}

	// serve takes the names as flags it knows, and nothing else changes.
	serve, _, err := app.NewRootCommand(io.Discard, io.Discard).Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	args := pod.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %v do not start with serve", args)
	}
	if err := serve.ParseFlags(args[1:]); err != nil {
		t.Fatalf("serve refuses the rendered args %v: %v", args, err)
	}
	mutating := install.Find(objs, "MutatingWebhookConfiguration", "")
	validating := install.Find(objs, "ValidatingWebhookConfiguration", "")
	if len(mutating) != 1 || len(validating) != 1 {
		t.Fatalf("%d mutating, %d validating webhook configurations", len(mutating), len(validating))
	}
	lease := full + ".shepherd.dev"
	for flag, want := range map[string]string{
		"webhook-service":                  svcName,
		"cert-secret":                      full + "-webhook-certs",
		"mutating-webhook-configuration":   mutating[0].GetName(),
		"validating-webhook-configuration": validating[0].GetName(),
		"leader-election-id":               lease,
	} {
		if got := serve.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("serve --%s is %q, want %q", flag, got, want)
		}
	}

	// The webhooks call the Service.
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		o := install.Find(objs, kind, "")[0]
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			if got, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name"); got != svcName {
				t.Errorf("%s webhook calls Service %q, want %q", kind, got, svcName)
			}
		}
	}

	// Every binding names a rendered role and the ServiceAccount; the
	// rules by name name the rendered objects and serve's.
	roles := map[string]bool{}
	for _, kind := range []string{"Role", "ClusterRole"} {
		for _, o := range install.Find(objs, kind, "") {
			roles[kind+"/"+o.GetName()] = true
			r := typed[rbacv1.ClusterRole](t, objs, kind, o.GetName())
			for _, rule := range r.Rules {
				for _, n := range rule.ResourceNames {
					var ok bool
					switch {
					case slices.Contains(rule.Resources, "secrets"):
						ok = n == full+"-webhook-certs"
					case slices.Contains(rule.Resources, "mutatingwebhookconfigurations"):
						ok = n == mutating[0].GetName()
					case slices.Contains(rule.Resources, "validatingwebhookconfigurations"):
						ok = n == validating[0].GetName()
					case slices.Contains(rule.Resources, "leases"):
						ok = n == lease
					}
					if !ok {
						t.Errorf("%s %s allows %v %q, which is not the rendered one", kind, o.GetName(), rule.Resources, n)
					}
				}
			}
		}
	}
	bindings := 0
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, o := range install.Find(objs, kind, "") {
			bindings++
			b := typed[rbacv1.RoleBinding](t, objs, kind, o.GetName())
			if !roles[b.RoleRef.Kind+"/"+b.RoleRef.Name] {
				t.Errorf("%s %s binds %s %s, which the chart does not render", kind, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
			}
			if len(b.Subjects) != 1 || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != customNS {
				t.Errorf("%s %s binds %+v, want ServiceAccount %s/%s", kind, b.Name, b.Subjects, customNS, sa.Name)
			}
		}
	}
	if bindings < 3 {
		t.Errorf("only %d bindings", bindings)
	}

	// cert-manager: the Certificate for the Service, its Secret mounted,
	// the webhook configurations injected from it, the issuers chained.
	if crts := install.Find(objs, "Certificate", ""); len(crts) > 0 {
		crt := install.Find(objs, "Certificate", svcName)
		if len(crt) != 1 {
			t.Fatalf("no serving Certificate %s", svcName)
		}
		dns, _, _ := unstructured.NestedStringSlice(crt[0].Object, "spec", "dnsNames")
		if !slices.Contains(dns, svcName+"."+customNS+".svc") {
			t.Errorf("Certificate dnsNames %v lack the Service's", dns)
		}
		secret, _, _ := unstructured.NestedString(crt[0].Object, "spec", "secretName")
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "certs" })
		if i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != secret {
			t.Errorf("the certs volume does not mount the Certificate's Secret %s", secret)
		}
		for _, o := range append(mutating, validating...) {
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != customNS+"/"+svcName {
				t.Errorf("%s inject-ca-from %q", o.GetName(), got)
			}
		}
		issuers := map[string]bool{}
		for _, o := range install.Find(objs, "Issuer", "") {
			issuers[o.GetName()] = true
		}
		for _, c := range crts {
			if ref, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "name"); !issuers[ref] {
				t.Errorf("Certificate %s is issued by %q, which the chart does not render", c.GetName(), ref)
			}
		}
		for _, o := range install.Find(objs, "Issuer", "") {
			if ca, ok, _ := unstructured.NestedString(o.Object, "spec", "ca", "secretName"); ok && ca != full+"-ca" {
				t.Errorf("Issuer %s signs with Secret %q, want the CA Certificate's %s-ca", o.GetName(), ca, full)
			}
		}
	}

	// The ServiceMonitor scrapes the Service (the job is its name), and the
	// alerts select that job.
	sm := install.Find(objs, "ServiceMonitor", full)
	if len(sm) != 1 {
		t.Fatalf("no ServiceMonitor %s", full)
	}
	rule := install.Find(objs, "PrometheusRule", full)
	if len(rule) != 1 {
		t.Fatalf("no PrometheusRule %s", full)
	}
	groups, _, _ := unstructured.NestedSlice(rule[0].Object, "spec", "groups")
	jobs := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			expr, _, _ := unstructured.NestedString(r.(map[string]any), "expr")
			if strings.Contains(expr, `job="shepherd-webhook"`) {
				t.Errorf("alert %v selects job shepherd-webhook, the Service is %s", r.(map[string]any)["alert"], svcName)
			}
			jobs += strings.Count(expr, `job="`+svcName+`"`)
		}
	}
	if jobs == 0 {
		t.Errorf("no alert selects job %q", svcName)
	}
}

// TestNameOverridesUnsetKeepNames: without the overrides, whatever the
// release is called, the names are deploy/'s (TestAgreesWithKustomize
// compares every object), serve gets no name flags, and the webhook
// configurations keep theirs.
func TestNameOverridesUnsetKeepNames(t *testing.T) {
	c := loadChart(t)
	for _, vals := range []map[string]any{nil, {"nameOverride": "", "fullnameOverride": ""}} {
		rel, err := renderErr(c, valueSet{name: "unset", namespace: defaultNS, values: vals})
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifest(rel.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			for _, flag := range []string{"--webhook-service", "--cert-secret", "--mutating-webhook-configuration", "--validating-webhook-configuration", "--leader-election-id"} {
				if strings.HasPrefix(a, flag+"=") {
					t.Errorf("default names, but the Deployment passes %s", a)
				}
			}
		}
		typed[corev1.Service](t, objs, "Service", "shepherd-webhook")
		typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "defaults.shepherd.dev")
		typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "shepherd")
	}

	// The schema refuses a name Kubernetes would, naming the value.
	for _, bad := range []string{"Acme", "-acme", "acme-", "1acme", "acme.admission", strings.Repeat("a", 56)} {
		for _, key := range []string{"nameOverride", "fullnameOverride"} {
			_, err := renderErr(c, valueSet{name: "bad", namespace: defaultNS, values: map[string]any{key: bad}})
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s %q: %v, want a schema error naming %s", key, bad, err, key)
			}
		}
	}
}
