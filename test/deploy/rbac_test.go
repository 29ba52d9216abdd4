package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestRBACSufficesForSelfSignedCertificates applies deploy/default's
// ServiceAccount, RBAC and webhook configurations for real, then runs the
// self-signed certificate authority as that ServiceAccount (impersonated):
// the least-privilege rules — Secrets and webhook configurations by name,
// list/watch through a metadata.name field selector, one Lease — must be
// enough to create the Secret, inject the bundle, win leader election,
// watch, and rotate.
func TestRBACSufficesForSelfSignedCertificates(t *testing.T) {
	ctx := context.Background()
	applyIdentityAndWebhooks(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = serviceAccount
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              "shepherd.shepherd.dev", // the Lease the Role names
		LeaderElectionNamespace:       shepherdNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := certs.DefaultOptions()
	opts.Namespace = shepherdNS
	opts.CertDir = t.TempDir()
	ready, err := certs.Setup(mgr, opts, clock.RealClock{})
	if err != nil {
		t.Fatalf("certs.Setup as shepherd's ServiceAccount: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: shepherdNS, Name: opts.SecretName}
	if err := env.Client.Get(ctx, key, secret); err != nil {
		t.Fatalf("the Secret was not created: %v", err)
	}
	if err := ready(nil); err != nil {
		t.Errorf("readiness: %v", err)
	}
	injected := func() error {
		if err := env.Client.Get(ctx, key, secret); err != nil {
			return err
		}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: opts.MutatingWebhookName}, m); err != nil {
			return err
		}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: opts.ValidatingWebhookName}, v); err != nil {
			return err
		}
		var bundles [][]byte
		for _, w := range m.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for _, w := range v.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for _, b := range bundles {
			if !bytes.Equal(b, secret.Data["ca.crt"]) {
				return fmt.Errorf("a webhook's caBundle differs from the Secret's ca.crt")
			}
		}
		return nil
	}
	testkit.Eventually(t, 60*time.Second, "CA bundle injected into deploy/webhook's configurations", injected)

	// A forced rotation goes through the watch (list/watch by name), the
	// leader's patch of the Secret and the file writer.
	before, err := os.ReadFile(filepath.Join(opts.CertDir, certs.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"rbac-test"}}}`, api.AnnotationRotateServingCert)
	if err := env.Client.Patch(ctx, &corev1.Secret{ObjectMeta: secret.ObjectMeta}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "serving certificate rotated and written by the ServiceAccount", func() error {
		got, err := os.ReadFile(filepath.Join(opts.CertDir, certs.CertFile))
		if err != nil {
			return err
		}
		if bytes.Equal(got, before) {
			return fmt.Errorf("tls.crt unchanged")
		}
		if err := env.Client.Get(ctx, key, secret); err != nil {
			return err
		}
		if secret.Annotations[api.AnnotationRotatedServingCert] != "rbac-test" {
			return fmt.Errorf("rotation not recorded")
		}
		return nil
	})
}

// serviceAccount is shepherd's ServiceAccount, as the apiserver sees it.
var serviceAccount = rest.ImpersonationConfig{
	UserName: "system:serviceaccount:" + shepherdNS + ":shepherd",
	Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + shepherdNS, "system:authenticated"},
}

// applyIdentityAndWebhooks applies deploy/default's Namespace,
// ServiceAccount, RBAC and webhook configurations for real (not the
// Deployment: there is no kubelet).
func applyIdentityAndWebhooks(t *testing.T) {
	t.Helper()
	for _, o := range build(t, deployDir("default")) {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("deploy-test"), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}
