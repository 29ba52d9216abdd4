package certs_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestSelfSignedCreatesSecretInjectsAndServes: from nothing, shepherd
// creates the Secret, injects the CA bundle into every webhook of both
// configurations, writes the pair where the webhook server reads it, and the
// apiserver then calls both webhooks successfully.
func TestSelfSignedCreatesSecretInjectsAndServes(t *testing.T) {
	e := newEnv(t)
	r := newReplica(t, "replica-0")
	e.webhookConfigs(t, r.url, r.url)
	// Before shepherd runs, nothing can be admitted: the configurations
	// trust no CA.
	if err := e.createConfigMap(context.Background()); err == nil {
		t.Fatal("a ConfigMap was admitted before any CA was injected; the webhooks do not apply to the test namespace")
	}
	r.start(t, e)

	s := e.secret(t)
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	serving, err := certs.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("Secret's serving pair: %v", err)
	}
	wantNames := []string{
		"shepherd-webhook." + e.system + ".svc",
		"shepherd-webhook." + e.system + ".svc.cluster.local",
		"shepherd-webhook",
		"shepherd-webhook." + e.system,
	}
	if !slices.Equal(serving.Cert.DNSNames, wantNames) {
		t.Errorf("serving DNS names %v, want %v", serving.Cert.DNSNames, wantNames)
	}
	bundle, err := certs.ParseCertificates(s.Data["ca.crt"])
	if err != nil || len(bundle) != 1 {
		t.Fatalf("ca.crt holds %d CAs (err %v), want 1", len(bundle), err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(bundle[0])
	if _, err := serving.Cert.Verify(x509.VerifyOptions{DNSName: wantNames[0], Roots: roots}); err != nil {
		t.Errorf("serving certificate does not verify against the bundle: %v", err)
	}

	testkit.Eventually(t, pollTimeout, "CA bundle injected into every webhook", func() error { return e.allInjected(t, s.Data["ca.crt"]) })
	if got := readFile(t, r.certDir, certs.CertFile); !bytes.Equal(got, s.Data[corev1.TLSCertKey]) {
		t.Error("tls.crt in the certificate directory differs from the Secret's")
	}
	if got := readFile(t, r.certDir, certs.KeyFile); !bytes.Equal(got, s.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("tls.key in the certificate directory differs from the Secret's")
	}
	if err := r.ready(nil); err != nil {
		t.Errorf("readiness: %v", err)
	}

	// The apiserver calls the webhooks (two mutating, two validating) and
	// trusts what they serve.
	before := r.admitted.Load()
	testkit.Eventually(t, pollTimeout, "a ConfigMap admitted through the webhooks", func() error {
		return e.createConfigMap(context.Background())
	})
	if got := r.admitted.Load() - before; got < 4 {
		t.Errorf("webhook server answered %d admission requests, want at least 4 (2 mutating + 2 validating)", got)
	}
}

// TestTamperedCABundleIsReinjected: someone overwrites a webhook's caBundle;
// shepherd puts the right one back and admission works again.
func TestTamperedCABundleIsReinjected(t *testing.T) {
	e := newEnv(t)
	r := newReplica(t, "replica-0")
	e.webhookConfigs(t, r.url, r.url)
	r.start(t, e)
	want := e.secret(t).Data["ca.crt"]
	testkit.Eventually(t, pollTimeout, "CA bundle injected", func() error { return e.allInjected(t, want) })

	foreign, err := certs.GenerateCA(time.Now(), time.Hour, "foreign")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.ValidatingWebhookName}, v); err != nil {
		t.Fatal(err)
	}
	orig := v.DeepCopy()
	v.Webhooks[1].ClientConfig.CABundle = foreign.CertPEM
	if err := env.Client.Patch(ctx, v, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.MutatingWebhookName}, m); err != nil {
		t.Fatal(err)
	}
	origM := m.DeepCopy()
	m.Webhooks[0].ClientConfig.CABundle = nil
	if err := env.Client.Patch(ctx, m, client.MergeFrom(origM)); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, pollTimeout, "tampered caBundles re-injected", func() error { return e.allInjected(t, want) })
	testkit.Eventually(t, pollTimeout, "a ConfigMap admitted after the re-injection", func() error { return e.createConfigMap(ctx) })
}

// loadLoop creates ConfigMaps through the webhooks until stopped, counting
// successes and keeping every failure.
type loadLoop struct {
	ok     atomic.Int64
	mu     sync.Mutex
	failed []error
	stop   func()
	done   chan struct{}
}

func startLoad(e *testEnv, workers int) *loadLoop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadLoop{stop: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := e.createConfigMap(ctx)
				switch {
				case err == nil:
					l.ok.Add(1)
				case ctx.Err() != nil && errors.Is(err, context.Canceled):
				default:
					l.mu.Lock()
					l.failed = append(l.failed, err)
					l.mu.Unlock()
				}
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

func (l *loadLoop) finish() (ok int64, failed []error) {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok.Load(), l.failed
}

// progress waits until the load loop admitted n more objects.
func (l *loadLoop) progress(t *testing.T, n int64, what string) {
	t.Helper()
	start := l.ok.Load()
	testkit.Eventually(t, pollTimeout, fmt.Sprintf("%d more admissions %s", n, what), func() error {
		if got := l.ok.Load() - start; got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

// annotateSecret sets an annotation on the certificate Secret.
func (e *testEnv) annotateSecret(t *testing.T, key, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	s := &corev1.Secret{}
	s.Namespace, s.Name = e.system, e.opts.SecretName
	if err := env.Client.Patch(context.Background(), s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// servedNow returns the Secret's serving certificate if every replica's
// webhook server serves it now.
func servedNow(t *testing.T, e *testEnv, replicas ...*replica) (*x509.Certificate, error) {
	s := e.secret(t)
	kp, err := certs.ParseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, err
	}
	for _, r := range replicas {
		got, err := r.served()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		if !got.Equal(kp.Cert) {
			return nil, fmt.Errorf("%s still serves serial %s, the Secret holds %s", r.name, got.SerialNumber, kp.Cert.SerialNumber)
		}
	}
	return kp.Cert, nil
}

// servingEverywhere waits until every replica's webhook server serves the
// Secret's serving certificate and returns it.
func servingEverywhere(t *testing.T, e *testEnv, what string, replicas ...*replica) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	testkit.Eventually(t, pollTimeout, what, func() error {
		var err error
		cert, err = servedNow(t, e, replicas...)
		return err
	})
	return cert
}

// TestRotationUnderLoadHasNoFailedAdmissions: two replicas (the mutating
// webhooks call one, the validating webhooks the other) while a load loop
// creates ConfigMaps; the serving certificate and then the CA are rotated
// by force. Not one admission may fail, and both replicas must end up
// serving a certificate from the new CA without a restart.
func TestRotationUnderLoadHasNoFailedAdmissions(t *testing.T) {
	e := newEnv(t)
	a, b := newReplica(t, "replica-a"), newReplica(t, "replica-b")
	e.webhookConfigs(t, a.url, b.url)
	a.start(t, e)
	b.start(t, e)

	initial := e.secret(t)
	testkit.Eventually(t, pollTimeout, "CA bundle injected", func() error { return e.allInjected(t, initial.Data["ca.crt"]) })
	first := servingEverywhere(t, e, "both replicas serve the first certificate", a, b)
	oldCA, err := certs.ParseKeyPair(initial.Data["ca-signer.crt"], initial.Data["ca-signer.key"])
	if err != nil {
		t.Fatal(err)
	}

	load := startLoad(e, 4)
	t.Cleanup(func() { load.finish() })
	load.progress(t, 20, "before any rotation")

	// Serving certificate rotation: same CA, new pair on every replica.
	e.annotateSecret(t, api.AnnotationRotateServingCert, "test-1")
	testkit.Eventually(t, pollTimeout, "serving rotation recorded", func() error {
		if got := e.secret(t).Annotations[api.AnnotationRotatedServingCert]; got != "test-1" {
			return fmt.Errorf("%s=%q", api.AnnotationRotatedServingCert, got)
		}
		return nil
	})
	second := servingEverywhere(t, e, "both replicas serve the rotated certificate", a, b)
	if second.Equal(first) {
		t.Fatal("the serving certificate did not change")
	}
	if err := second.CheckSignatureFrom(oldCA.Cert); err != nil {
		t.Errorf("a serving rotation changed the CA: %v", err)
	}
	load.progress(t, 20, "after the serving rotation")

	// CA rotation: the new CA joins the bundle next to the old one, then the
	// serving certificate moves to it.
	e.annotateSecret(t, api.AnnotationRotateCA, "test-2")
	var newCA *certs.KeyPair
	testkit.Eventually(t, pollTimeout, "CA rotation recorded", func() error {
		s := e.secret(t)
		if got := s.Annotations[api.AnnotationRotatedCA]; got != "test-2" {
			return fmt.Errorf("%s=%q", api.AnnotationRotatedCA, got)
		}
		newCA, err = certs.ParseKeyPair(s.Data["ca-signer.crt"], s.Data["ca-signer.key"])
		return err
	})
	if newCA.Cert.Equal(oldCA.Cert) {
		t.Fatal("the CA did not change")
	}
	var third *x509.Certificate
	testkit.Eventually(t, pollTimeout, "both replicas serve a certificate from the new CA", func() error {
		if third, err = servedNow(t, e, a, b); err != nil {
			return err
		}
		return third.CheckSignatureFrom(newCA.Cert)
	})
	final := e.secret(t)
	bundle, err := certs.ParseCertificates(final.Data["ca.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if len(bundle) != 2 || !bundle[0].Equal(newCA.Cert) || !bundle[1].Equal(oldCA.Cert) {
		t.Errorf("bundle after the CA rotation has %d CAs, want the new then the old", len(bundle))
	}
	testkit.Eventually(t, pollTimeout, "bundle with both CAs injected", func() error { return e.allInjected(t, final.Data["ca.crt"]) })
	load.progress(t, 20, "after the CA rotation")

	ok, failed := load.finish()
	for i, err := range failed {
		if i == 10 {
			t.Errorf("... and %d more", len(failed)-10)
			break
		}
		t.Errorf("failed admission: %v", err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d admissions failed during the rotations", len(failed), ok+int64(len(failed)))
	}
	if a.admitted.Load() == 0 || b.admitted.Load() == 0 {
		t.Errorf("admissions answered: %s %d, %s %d; both replicas must have served", a.name, a.admitted.Load(), b.name, b.admitted.Load())
	}
	t.Logf("%d admissions, none failed; replica answers: %d and %d", ok, a.admitted.Load(), b.admitted.Load())
	for _, r := range []*replica{a, b} {
		if err := r.ready(nil); err != nil {
			t.Errorf("%s readiness after the rotations: %v", r.name, err)
		}
	}
}

// TestServingCertificateRotatesOnItsOwn: with a 30 s serving lifetime the
// leader replaces the certificate at 2/3 of it (about 20 s) on its own — no
// event, no annotation, just the requeue the decision asked for — and the
// apiserver keeps admitting throughout.
func TestServingCertificateRotatesOnItsOwn(t *testing.T) {
	e := newEnv(t)
	e.opts.ServingLifetime = 30 * time.Second
	r := newReplica(t, "replica-0")
	e.webhookConfigs(t, r.url, r.url)
	r.start(t, e)
	first := servingEverywhere(t, e, "the first certificate served", r)
	if life := first.NotAfter.Sub(certs.IssuedAt(first)); life != 30*time.Second {
		t.Fatalf("serving certificate lifetime %s, want 30s", life)
	}

	load := startLoad(e, 2)
	t.Cleanup(func() { load.finish() })
	var second *x509.Certificate
	testkit.Eventually(t, pollTimeout, "a new certificate served without any request for it", func() error {
		got, err := servedNow(t, e, r)
		if err != nil {
			return err
		}
		if got.Equal(first) {
			return fmt.Errorf("still serving the first certificate (rotation due at %s)", certs.IssuedAt(first).Add(20*time.Second))
		}
		second = got
		return nil
	})
	if due := certs.IssuedAt(first).Add(20 * time.Second); certs.IssuedAt(second).Before(due) {
		t.Errorf("rotated at %s, before 2/3 of the first certificate's life (%s)", certs.IssuedAt(second), due)
	}
	if !certs.IssuedAt(second).Before(first.NotAfter) {
		t.Errorf("rotated at %s, after the first certificate expired (%s)", certs.IssuedAt(second), first.NotAfter)
	}
	load.progress(t, 10, "after the rotation")
	ok, failed := load.finish()
	if len(failed) > 0 {
		t.Fatalf("%d of %d admissions failed across the rotation; first: %v", len(failed), ok+int64(len(failed)), failed[0])
	}
}

// TestSecretDeletedRecoversWithoutFailures: someone deletes the certificate
// Secret under load. shepherd issues a new CA and serving certificate at
// once and keeps the CA the webhook configurations still hold in the new
// bundle, so the replicas' current certificate stays trusted until they
// load the new one: no admission fails.
func TestSecretDeletedRecoversWithoutFailures(t *testing.T) {
	e := newEnv(t)
	a, b := newReplica(t, "replica-a"), newReplica(t, "replica-b")
	e.webhookConfigs(t, a.url, b.url)
	a.start(t, e)
	b.start(t, e)
	old := e.secret(t)
	testkit.Eventually(t, pollTimeout, "CA bundle injected", func() error { return e.allInjected(t, old.Data["ca.crt"]) })
	oldCA, err := certs.ParseKeyPair(old.Data["ca-signer.crt"], old.Data["ca-signer.key"])
	if err != nil {
		t.Fatal(err)
	}

	load := startLoad(e, 4)
	t.Cleanup(func() { load.finish() })
	load.progress(t, 20, "before the deletion")
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	var newCA *certs.KeyPair
	testkit.Eventually(t, pollTimeout, "a new Secret with a new CA", func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(old), s); err != nil {
			return err
		}
		if s.UID == old.UID {
			return fmt.Errorf("still the old Secret")
		}
		newCA, err = certs.ParseKeyPair(s.Data["ca-signer.crt"], s.Data["ca-signer.key"])
		return err
	})
	if newCA.Cert.Equal(oldCA.Cert) {
		t.Fatal("the new Secret reuses the deleted CA")
	}
	third := servingEverywhere(t, e, "both replicas serve the new certificate", a, b)
	if err := third.CheckSignatureFrom(newCA.Cert); err != nil {
		t.Errorf("new serving certificate not from the new CA: %v", err)
	}
	bundle, err := certs.ParseCertificates(e.secret(t).Data["ca.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if len(bundle) != 2 || !bundle[0].Equal(newCA.Cert) || !bundle[1].Equal(oldCA.Cert) {
		t.Errorf("bundle after the deletion has %d CAs, want the new CA then the one the configurations held", len(bundle))
	}
	load.progress(t, 20, "after the deletion")
	ok, failed := load.finish()
	if len(failed) > 0 {
		t.Fatalf("%d of %d admissions failed around the deletion; first: %v", len(failed), ok+int64(len(failed)), failed[0])
	}
}
