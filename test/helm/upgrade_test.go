package helm_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
)

// TestUpgradeKeepsCertificates installs a release for real, does what
// shepherd does at start in self-signed mode (creates the certificate
// Secret, injects the CA bundle into both webhook configurations), then
// `helm upgrade`s with changed values: the upgrade takes effect, and the
// Secret and every webhook's caBundle are exactly as shepherd left them.
//
// crds.install is off here: the control plane already has shepherd's CRD,
// from deploy/crds, not owned by a Helm release (the dry-run test covers the
// chart's CRD).
func TestUpgradeKeepsCertificates(t *testing.T) {
	ctx := context.Background()
	const ns = defaultNS
	ensureNamespace(t, ns)
	cfg := helmConfig(t, ns)
	c := loadChart(t)
	base := map[string]any{"crds": map[string]any{"install": false}}

	inst := action.NewInstall(cfg)
	inst.ReleaseName = "shepherd"
	inst.Namespace = ns
	if _, err := inst.Run(c, base); err != nil {
		t.Fatalf("helm install: %v", err)
	}

	// What shepherd's certificate authority does (certs/).
	now := time.Now()
	ca, err := certs.GenerateCA(now, time.Hour, "shepherd-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := certs.GenerateServing(now, time.Hour, ca, certs.ServiceDNSNames(certs.DefaultServiceName, ns), nil)
	if err != nil {
		t.Fatal(err)
	}
	bundle := certs.EncodeBundle([]*x509.Certificate{ca.Cert})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: certs.DefaultSecretName, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			certs.SecretCertKey: serving.CertPEM, certs.SecretKeyKey: serving.KeyPEM, certs.SecretCAKey: bundle,
			certs.SecretSignerCertKey: ca.CertPEM, certs.SecretSignerKeyKey: ca.KeyPEM,
		},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: certs.DefaultMutatingWebhook}, m); err != nil {
		t.Fatal(err)
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: certs.DefaultValidatingWebhook}, v); err != nil {
		t.Fatal(err)
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := env.Client.Update(ctx, v); err != nil {
		t.Fatal(err)
	}

	up := action.NewUpgrade(cfg)
	up.Namespace = ns
	changed := map[string]any{
		"crds":     map[string]any{"install": false},
		"replicas": 3,
		"webhook":  map[string]any{"timeoutSeconds": 7, "excludedNamespaces": []any{"kube-system", "kube-node-lease"}},
	}
	rel, err := up.Run("shepherd", c, changed)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if rel.Version != 2 {
		t.Errorf("release version %d after one upgrade, want 2", rel.Version)
	}

	dep := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shepherd"}, dep); err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d after the upgrade, want 3: the upgrade did not apply", *dep.Spec.Replicas)
	}
	liveM := &admissionregistrationv1.MutatingWebhookConfiguration{}
	liveV := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: certs.DefaultMutatingWebhook}, liveM); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "shepherd"}, liveV); err != nil {
		t.Fatal(err)
	}
	type hook struct {
		name     string
		cc       admissionregistrationv1.WebhookClientConfig
		timeout  int32
		excluded []string
	}
	var hooks []hook
	for _, w := range liveM.Webhooks {
		hooks = append(hooks, hook{w.Name, w.ClientConfig, *w.TimeoutSeconds, w.NamespaceSelector.MatchExpressions[0].Values})
	}
	for _, w := range liveV.Webhooks {
		var excluded []string
		if w.Name != api.PolicyWebhookName { // cluster-scoped: no namespaceSelector
			excluded = w.NamespaceSelector.MatchExpressions[0].Values
		}
		hooks = append(hooks, hook{w.Name, w.ClientConfig, *w.TimeoutSeconds, excluded})
	}
	if len(hooks) != 3 {
		t.Fatalf("%d webhooks after the upgrade, want 3", len(hooks))
	}
	for _, h := range hooks {
		if h.timeout != 7 || (len(h.excluded) != 3 && h.name != api.PolicyWebhookName) {
			t.Errorf("webhook %s: timeout %d, excluded %v after the upgrade; want 7 and 3 namespaces", h.name, h.timeout, h.excluded)
		}
		if !bytes.Equal(h.cc.CABundle, bundle) {
			t.Errorf("webhook %s: the upgrade changed the injected caBundle (%d bytes, want shepherd's %d)", h.name, len(h.cc.CABundle), len(bundle))
		}
	}
	live := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), live); err != nil {
		t.Fatalf("the certificate Secret after the upgrade: %v", err)
	}
	if live.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the upgrade wrote the certificate Secret (resourceVersion %s → %s)", secret.ResourceVersion, live.ResourceVersion)
	}
	for k, want := range secret.Data {
		if !bytes.Equal(live.Data[k], want) {
			t.Errorf("the upgrade changed %s of the certificate Secret", k)
		}
	}
}

// helmConfig is Helm's client for the test control plane, keeping releases
// in Secrets as the helm CLI does.
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}
