package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/install"
)

// TestKustomizeBuild: both overlays (and the Prometheus component) build,
// hold what an install needs, and include every generated CRD.
func TestKustomizeBuild(t *testing.T) {
	crdFiles, err := filepath.Glob(deployDir("crds", "*.yaml"))
	if err != nil || len(crdFiles) == 0 {
		t.Fatalf("no CRDs in deploy/crds: %v", err)
	}
	for name, objs := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			crds := install.Find(objs, "CustomResourceDefinition", "")
			if got := len(crds); got != len(crdFiles) {
				t.Errorf("%d CRDs in the build, %d files in deploy/crds: list every file in deploy/crds/kustomization.yml", got, len(crdFiles))
			}
			// shepherd never installs another project's CRD (docs/concepts.md,
			// "Beside Trainer, JobSet and Grove").
			for _, crd := range crds {
				if g, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); g != "shepherd.dev" {
					t.Errorf("the %s variant installs CRD %s of group %q: shepherd owns only shepherd.dev", name, crd.GetName(), g)
				}
			}
			for _, want := range []string{
				"Namespace/" + shepherdNS, "ServiceAccount/shepherd", "ClusterRole/shepherd", "ClusterRoleBinding/shepherd",
				"Role/shepherd-leader-election", "RoleBinding/shepherd-leader-election", "ClusterRole/shepherd-metrics-reader",
				"Deployment/shepherd", "PodDisruptionBudget/shepherd", "Service/shepherd-webhook",
				"MutatingWebhookConfiguration/defaults.shepherd.dev", "ValidatingWebhookConfiguration/shepherd",
			} {
				if !slices.Contains(kinds(objs), want) {
					t.Errorf("build lacks %s", want)
				}
			}
			for _, o := range objs {
				if o.GetNamespace() != "" && o.GetNamespace() != shepherdNS {
					t.Errorf("%s/%s is in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), shepherdNS)
				}
			}
			selfSigned := name != "cert-manager"
			if got := len(install.Find(objs, "Role", "shepherd-certs")) == 1; got != selfSigned {
				t.Errorf("Role shepherd-certs present = %v, want %v (self-signed mode only)", got, selfSigned)
			}
			if got := len(install.Find(objs, "ClusterRole", "shepherd-webhook-configurations")) == 1; got != selfSigned {
				t.Errorf("ClusterRole shepherd-webhook-configurations present = %v, want %v (self-signed mode only)", got, selfSigned)
			}
			// --skip-unread-updates patches the configurations in every mode.
			if len(install.Find(objs, "ClusterRole", "shepherd-webhook-conditions")) != 1 {
				t.Errorf("ClusterRole shepherd-webhook-conditions missing: serve keeps its UPDATE matchCondition in every certificate mode")
			}
			if got := len(install.Find(objs, "ServiceMonitor", "")) == 1; got != (name == "default+prometheus") {
				t.Errorf("ServiceMonitor present = %v", got)
			}
		})
	}
}

// servedByTestAPIServer: kinds whose CRDs the test apiserver does not have.
func servedByTestAPIServer(o *unstructured.Unstructured) bool {
	g := o.GroupVersionKind().Group
	return g != cmapi.SchemeGroupVersion.Group && g != "monitoring.coreos.com"
}

// TestManifestsAcceptedByAPIServer: every object of both overlays passes a
// server-side apply dry-run: schema, defaulting, validation, admission.
// The Namespace is applied for real first so namespaced objects have one.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	ctx := context.Background()
	for name, objs := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			for _, ns := range install.Find(objs, "Namespace", "") {
				if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(ns.DeepCopy()), client.FieldOwner("deploy-test"), client.ForceOwnership); err != nil {
					t.Fatalf("applying Namespace %s: %v", ns.GetName(), err)
				}
			}
			checked := 0
			for _, o := range objs {
				if !servedByTestAPIServer(o) {
					continue
				}
				err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.FieldOwner("deploy-test"), client.ForceOwnership, client.DryRunAll)
				if err != nil {
					t.Errorf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
				checked++
			}
			// The namespace, ServiceAccount, RBAC, Deployment, PDB, Service,
			// webhook configurations and shepherd's one CRD: at least 12.
			if checked < 12 {
				t.Errorf("only %d objects dry-run", checked)
			}
		})
	}
}

// TestCertManagerObjects: the cert-manager objects decode strictly into
// cert-manager's API types and form the chain self-signed Issuer → CA
// Certificate → CA Issuer → serving Certificate, whose Secret the
// Deployment mounts and whose CA the webhook configurations get injected.
func TestCertManagerObjects(t *testing.T) {
	objs := build(t, deployDir("cert-manager"))
	issuers := map[string]*cmapi.Issuer{}
	certsByName := map[string]*cmapi.Certificate{}
	for _, o := range objs {
		if o.GroupVersionKind().Group != cmapi.SchemeGroupVersion.Group {
			continue
		}
		if o.GetAPIVersion() != cmapi.SchemeGroupVersion.String() {
			t.Errorf("%s %s has apiVersion %s, want %s", o.GetKind(), o.GetName(), o.GetAPIVersion(), cmapi.SchemeGroupVersion)
		}
		switch o.GetKind() {
		case cmapi.IssuerKind:
			is := &cmapi.Issuer{}
			if err := strict(o, is); err != nil {
				t.Errorf("Issuer %s does not decode into cert-manager's Issuer: %v", o.GetName(), err)
			}
			issuers[is.Name] = is
		case cmapi.CertificateKind:
			c := &cmapi.Certificate{}
			if err := strict(o, c); err != nil {
				t.Errorf("Certificate %s does not decode into cert-manager's Certificate: %v", o.GetName(), err)
			}
			certsByName[c.Name] = c
		default:
			t.Errorf("unexpected cert-manager kind %s", o.GetKind())
		}
	}
	if len(issuers) != 2 || len(certsByName) != 2 {
		t.Fatalf("%d Issuers and %d Certificates, want 2 and 2", len(issuers), len(certsByName))
	}
	issuerOf := func(c *cmapi.Certificate) *cmapi.Issuer {
		if c.Spec.IssuerRef.Kind != cmapi.IssuerKind {
			t.Errorf("Certificate %s: issuerRef kind %q, want Issuer", c.Name, c.Spec.IssuerRef.Kind)
		}
		is := issuers[c.Spec.IssuerRef.Name]
		if is == nil {
			t.Fatalf("Certificate %s: issuerRef %q is not in the overlay", c.Name, c.Spec.IssuerRef.Name)
		}
		return is
	}
	var ca, serving *cmapi.Certificate
	for _, c := range certsByName {
		if c.Spec.IsCA {
			ca = c
		} else {
			serving = c
		}
	}
	if ca == nil || serving == nil {
		t.Fatal("want one CA Certificate (isCA) and one serving Certificate")
	}
	if is := issuerOf(ca); is.Spec.SelfSigned == nil {
		t.Errorf("the CA Certificate's Issuer %s is not self-signed", is.Name)
	}
	caIssuer := issuerOf(serving)
	if caIssuer.Spec.CA == nil || caIssuer.Spec.CA.SecretName != ca.Spec.SecretName {
		t.Errorf("the serving Certificate's Issuer %s must be a CA Issuer over Secret %q", caIssuer.Name, ca.Spec.SecretName)
	}
	for _, c := range []*cmapi.Certificate{ca, serving} {
		if c.Spec.PrivateKey == nil || c.Spec.PrivateKey.Algorithm != cmapi.ECDSAKeyAlgorithm || c.Spec.PrivateKey.Size != 256 {
			t.Errorf("Certificate %s: want an ECDSA P-256 key", c.Name)
		}
		if c.Spec.Duration == nil || c.Spec.RenewBefore == nil || c.Spec.RenewBefore.Duration >= c.Spec.Duration.Duration {
			t.Errorf("Certificate %s: want a duration and a shorter renewBefore", c.Name)
		}
	}
	if want := certs.ServiceDNSNames("shepherd-webhook", shepherdNS); !slices.Equal(serving.Spec.DNSNames, want) {
		t.Errorf("serving Certificate dnsNames %v, want %v", serving.Spec.DNSNames, want)
	}
	if !slices.Contains(serving.Spec.Usages, cmapi.UsageServerAuth) {
		t.Errorf("serving Certificate usages %v lack server auth", serving.Spec.Usages)
	}

	dep := one[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	vol := volume(t, dep, "certs")
	if vol.Secret == nil || vol.Secret.SecretName != serving.Spec.SecretName {
		t.Errorf("Deployment volume certs = %+v, want the serving Certificate's Secret %q", vol.VolumeSource, serving.Spec.SecretName)
	}
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--cert-mode=cert-manager") {
		t.Errorf("Deployment args %v lack --cert-mode=cert-manager", dep.Spec.Template.Spec.Containers[0].Args)
	}
	want := shepherdNS + "/" + serving.Name
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		for _, o := range install.Find(objs, kind, "") {
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != want {
				t.Errorf("%s %s: cert-manager.io/inject-ca-from = %q, want %q", kind, o.GetName(), got, want)
			}
		}
	}
}

// TestServiceMonitor: the optional ServiceMonitor selects shepherd's
// Service and scrapes its metrics port over HTTPS with a token.
func TestServiceMonitor(t *testing.T) {
	objs := overlays(t)["default+prometheus"]
	sms := install.Find(objs, "ServiceMonitor", "")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	sm := sms[0]
	svc := one[corev1.Service](t, objs, "Service", "shepherd-webhook")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Fatal("ServiceMonitor has no selector")
	}
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service has %q", k, v, svc.Labels[k])
		}
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("%d endpoints, want 1", len(eps))
	}
	ep := eps[0].(map[string]any)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep["port"] }) {
		t.Errorf("endpoint port %v is not a port of the Service", ep["port"])
	}
	if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil {
		t.Errorf("endpoint %v: want https with a bearer token (the metrics endpoint is authenticated)", ep)
	}
}

func volume(t *testing.T, d *appsv1.Deployment, name string) corev1.Volume {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("Deployment %s has no volume %q", d.Name, name)
	return corev1.Volume{}
}

// TestSecuritySettings asserts the hardening of both overlays.
func TestSecuritySettings(t *testing.T) {
	for name, objs := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			dep := one[appsv1.Deployment](t, objs, "Deployment", "shepherd")
			if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
				t.Errorf("replicas = %v, want 2", dep.Spec.Replicas)
			}
			pod := dep.Spec.Template.Spec
			if pod.ServiceAccountName != "shepherd" {
				t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
			}
			psc := pod.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Error("pod securityContext must run as a non-root user")
			}
			if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("pod seccompProfile must be RuntimeDefault")
			}
			if pod.HostNetwork || pod.HostPID || pod.HostIPC {
				t.Error("pod uses a host namespace")
			}
			for _, c := range append(pod.InitContainers, pod.Containers...) {
				sc := c.SecurityContext
				switch {
				case sc == nil:
					t.Fatalf("container %s has no securityContext", c.Name)
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Errorf("container %s: allowPrivilegeEscalation must be false", c.Name)
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Errorf("container %s: readOnlyRootFilesystem must be true", c.Name)
				case sc.Privileged != nil && *sc.Privileged:
					t.Errorf("container %s is privileged", c.Name)
				case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
					t.Errorf("container %s: capabilities must drop ALL and add none", c.Name)
				case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
					t.Errorf("container %s: runAsNonRoot must be true", c.Name)
				}
				if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("container %s: seccompProfile %s", c.Name, sc.SeccompProfile.Type)
				}
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if _, ok := c.Resources.Requests[r]; !ok {
						t.Errorf("container %s has no %s request", c.Name, r)
					}
					if _, ok := c.Resources.Limits[r]; !ok {
						t.Errorf("container %s has no %s limit", c.Name, r)
					}
				}
				probePath := func(p *corev1.Probe) string {
					if p == nil || p.HTTPGet == nil {
						return ""
					}
					return p.HTTPGet.Path
				}
				if probePath(c.LivenessProbe) != "/healthz" || probePath(c.ReadinessProbe) != "/readyz" {
					t.Errorf("container %s: liveness %q, readiness %q; want /healthz and /readyz", c.Name, probePath(c.LivenessProbe), probePath(c.ReadinessProbe))
				}
				// The certificate directory is a volume, never the read-only
				// root filesystem.
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == "certs" && m.MountPath == "/tmp/k8s-webhook-server/serving-certs"
				}) {
					t.Errorf("container %s does not mount the certs volume at the certificate directory", c.Name)
				}
			}
			if certsVol := volume(t, dep, "certs"); name != "cert-manager" && certsVol.EmptyDir == nil {
				t.Errorf("self-signed mode: the certs volume must be an emptyDir, got %+v", certsVol.VolumeSource)
			}

			pdb := one[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "shepherd")
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
				t.Errorf("PDB minAvailable %v, want at least 1", pdb.Spec.MinAvailable)
			}
			if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
				t.Error("PDB does not select shepherd's pods")
			}

			svc := one[corev1.Service](t, objs, "Service", "shepherd-webhook")
			if !selects(svc.Spec.Selector, dep.Spec.Template.Labels) {
				t.Error("Service does not select shepherd's pods")
			}
			ports := map[string]corev1.ServicePort{}
			for _, p := range svc.Spec.Ports {
				ports[p.Name] = p
			}
			if p := ports["webhook"]; p.Port != 443 || p.TargetPort != intstr.FromString("webhook") {
				t.Errorf("Service webhook port %+v, want 443 → container port webhook", p)
			}
			if _, ok := ports["metrics"]; !ok {
				t.Error("Service has no metrics port")
			}

			checkWebhooks(t, objs)
			checkRBAC(t, objs)
		})
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkWebhooks: the webhook configuration settings of README.md ("Its
// admission webhooks"), and matchPolicy Equivalent, via the Service.
func checkWebhooks(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	type common struct {
		name    string
		cc      admissionregistrationv1.WebhookClientConfig
		fp      *admissionregistrationv1.FailurePolicyType
		timeout *int32
		se      *admissionregistrationv1.SideEffectClass
		mp      *admissionregistrationv1.MatchPolicyType
		ns      *metav1.LabelSelector
	}
	var all []common
	m := one[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "defaults.shepherd.dev")
	for _, w := range m.Webhooks {
		all = append(all, common{w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, w.SideEffects, w.MatchPolicy, w.NamespaceSelector})
	}
	v := one[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "shepherd")
	for _, w := range v.Webhooks {
		all = append(all, common{w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, w.SideEffects, w.MatchPolicy, w.NamespaceSelector})
	}
	if len(all) == 0 {
		t.Fatal("no webhooks")
	}
	for _, w := range all {
		if w.cc.Service == nil || w.cc.Service.Name != "shepherd-webhook" || w.cc.Service.Namespace != shepherdNS ||
			w.cc.Service.Port == nil || *w.cc.Service.Port != 443 {
			t.Errorf("webhook %s: clientConfig.service %+v, want shepherd-webhook.%s:443", w.name, w.cc.Service, shepherdNS)
		}
		if w.fp == nil || *w.fp != admissionregistrationv1.Fail {
			t.Errorf("webhook %s: failurePolicy must be Fail", w.name)
		}
		if w.timeout == nil || *w.timeout > 5 {
			t.Errorf("webhook %s: timeoutSeconds %v, want ≤ 5", w.name, w.timeout)
		}
		if w.se == nil || (*w.se != admissionregistrationv1.SideEffectClassNone && *w.se != admissionregistrationv1.SideEffectClassNoneOnDryRun) {
			t.Errorf("webhook %s: sideEffects %v, want None or NoneOnDryRun", w.name, w.se)
		}
		if w.mp == nil || *w.mp != admissionregistrationv1.Equivalent {
			t.Errorf("webhook %s: matchPolicy must be Equivalent", w.name)
		}
		excluded := map[string]bool{}
		if w.ns != nil {
			for _, e := range w.ns.MatchExpressions {
				if e.Key == corev1.LabelMetadataName && e.Operator == "NotIn" {
					for _, v := range e.Values {
						excluded[v] = true
					}
				}
			}
		}
		// WorkloadPolicies are cluster-scoped: a namespaceSelector never
		// applies to them.
		if w.name != api.PolicyWebhookName && (!excluded["kube-system"] || !excluded[shepherdNS]) {
			t.Errorf("webhook %s: namespaceSelector must exclude kube-system and %s", w.name, shepherdNS)
		}
	}
}

// checkRBAC: verbs are enumerated per resource; nothing is wildcarded;
// nothing can escalate; Secrets only in shepherd's namespace and by name
// except create; webhook configurations only by name.
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var rules []struct {
		where string
		rule  rbacv1.PolicyRule
	}
	for _, o := range install.Find(objs, "ClusterRole", "") {
		cr := one[rbacv1.ClusterRole](t, objs, "ClusterRole", o.GetName())
		if cr.AggregationRule != nil {
			t.Errorf("ClusterRole %s aggregates", cr.Name)
		}
		for _, r := range cr.Rules {
			rules = append(rules, struct {
				where string
				rule  rbacv1.PolicyRule
			}{"ClusterRole/" + cr.Name, r})
		}
	}
	for _, o := range install.Find(objs, "Role", "") {
		r := one[rbacv1.Role](t, objs, "Role", o.GetName())
		for _, rule := range r.Rules {
			rules = append(rules, struct {
				where string
				rule  rbacv1.PolicyRule
			}{"Role/" + r.Name, rule})
		}
	}
	for _, r := range rules {
		for _, field := range [][]string{r.rule.Verbs, r.rule.APIGroups, r.rule.Resources, r.rule.NonResourceURLs} {
			for _, v := range field {
				if strings.Contains(v, "*") {
					t.Errorf("%s: wildcard %q in %+v", r.where, v, r.rule)
				}
			}
		}
		for _, v := range r.rule.Verbs {
			if slices.Contains([]string{"escalate", "bind", "impersonate", "update", "deletecollection"}, v) &&
				!(v == "update" && slices.Equal(r.rule.Resources, []string{"leases"})) {
				t.Errorf("%s grants %q on %v", r.where, v, r.rule.Resources)
			}
		}
		for _, res := range r.rule.Resources {
			switch res {
			case "secrets":
				if !strings.HasPrefix(r.where, "Role/") {
					t.Errorf("%s grants access to Secrets cluster-wide", r.where)
				}
				if len(r.rule.ResourceNames) == 0 && !slices.Equal(r.rule.Verbs, []string{"create"}) {
					t.Errorf("%s: Secret verbs %v not limited by resourceNames", r.where, r.rule.Verbs)
				}
			case "mutatingwebhookconfigurations", "validatingwebhookconfigurations":
				// Reading every validating configuration is how serve sees
				// an upstream webhook it can leave a rule to
				// (--defer-to-upstream); list and watch cannot be narrowed
				// by name. Everything else is limited to shepherd's own.
				readOnly := !slices.ContainsFunc(r.rule.Verbs, func(v string) bool { return v != "list" && v != "watch" })
				if len(r.rule.ResourceNames) == 0 && !(readOnly && res == "validatingwebhookconfigurations") {
					t.Errorf("%s: webhook configuration access not limited by resourceNames", r.where)
				}
			}
		}
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range install.Find(objs, kind, "") {
			b := one[rbacv1.RoleBinding](t, objs, kind, o.GetName())
			for _, s := range b.Subjects {
				if s.Kind != rbacv1.ServiceAccountKind || s.Name != "shepherd" || s.Namespace != shepherdNS {
					t.Errorf("%s %s binds %+v; want only shepherd's ServiceAccount", kind, b.Name, s)
				}
			}
		}
	}
}

var _ = apierrors.IsNotFound
var _ = os.Getenv
