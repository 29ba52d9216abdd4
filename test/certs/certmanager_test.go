package certs_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestCertManagerModeServesMountedFiles: in cert-manager mode shepherd
// creates no Secret and touches no webhook configuration; it is ready once
// the mounted pair loads, serves it, and serves a renewed pair without a
// restart. The test plays cert-manager: it issues the pair, writes it the
// way the kubelet updates a Secret volume, and injects the CA.
func TestCertManagerModeServesMountedFiles(t *testing.T) {
	e := newEnv(t)
	e.opts.Mode = certs.ModeCertManager
	r := newReplica(t, "replica-0")
	e.webhookConfigs(t, r.url, r.url)

	now := time.Now()
	ca, err := certs.GenerateCA(now, 24*time.Hour, "cert-manager-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func() *certs.KeyPair {
		kp, err := certs.GenerateServing(now, time.Hour, ca, []string{"shepherd-webhook." + e.system + ".svc"}, []net.IP{net.ParseIP("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := certs.WriteFiles(r.certDir, map[string][]byte{certs.CertFile: kp.CertPEM, certs.KeyFile: kp.KeyPEM, certs.CAFile: ca.CertPEM}); err != nil {
			t.Fatal(err)
		}
		return kp
	}
	if err := certs.ReadyChecker(r.certDir, clock.RealClock{})(nil); err == nil {
		t.Fatal("ready before any certificate is mounted")
	}
	first := issue()
	r.start(t, e)
	if err := r.ready(nil); err != nil {
		t.Fatalf("readiness with the mounted pair: %v", err)
	}
	e.injectCA(t, ca.CertPEM)
	testkit.Eventually(t, pollTimeout, "a ConfigMap admitted with the mounted certificate", func() error { return e.createConfigMap(context.Background()) })
	if got, err := r.served(); err != nil || !got.Equal(first.Cert) {
		t.Fatalf("served certificate: err %v, equal to the mounted one: %v", err, err == nil && got.Equal(first.Cert))
	}

	renewed := issue()
	testkit.Eventually(t, pollTimeout, "the renewed pair served without a restart", func() error {
		got, err := r.served()
		if err != nil {
			return err
		}
		if !got.Equal(renewed.Cert) {
			return fmt.Errorf("still serving serial %s", got.SerialNumber)
		}
		return nil
	})
	if err := e.createConfigMap(context.Background()); err != nil {
		t.Errorf("admission after the renewal: %v", err)
	}

	var secrets corev1.SecretList
	if err := env.Client.List(context.Background(), &secrets, client.InNamespace(e.system)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("cert-manager mode created %d Secrets", len(secrets.Items))
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: e.opts.MutatingWebhookName}, m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.ManagedFields {
		if f.Manager == "shepherd" {
			t.Errorf("cert-manager mode wrote the MutatingWebhookConfiguration: %+v", f)
		}
	}
}

// injectCA sets every webhook's caBundle, as cert-manager's cainjector does.
func (e *testEnv) injectCA(t *testing.T, ca []byte) {
	t.Helper()
	ctx := context.Background()
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.MutatingWebhookName}, m); err != nil {
		t.Fatal(err)
	}
	origM := m.DeepCopy()
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = ca
	}
	if err := env.Client.Patch(ctx, m, client.MergeFrom(origM), client.FieldOwner("cainjector")); err != nil {
		t.Fatal(err)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.ValidatingWebhookName}, v); err != nil {
		t.Fatal(err)
	}
	origV := v.DeepCopy()
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = ca
	}
	if err := env.Client.Patch(ctx, v, client.MergeFrom(origV), client.FieldOwner("cainjector")); err != nil {
		t.Fatal(err)
	}
}
