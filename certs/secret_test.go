package certs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
)

// TestLoadSecret: each part of the Secret is read only when it parses and
// fits (the signer must be a CA, each key must match its certificate);
// a rotation is requested while the rotate-* token differs from the
// rotated-* one.
func TestLoadSecret(t *testing.T) {
	ca := mustCA(t, t0, caLife)
	serving := mustServing(t, t0, servingLife, ca)
	data := func() map[string][]byte { return secretData(ca, certs(ca), serving) }
	secret := func(data map[string][]byte, annotations ...string) *corev1.Secret {
		s := &corev1.Secret{Data: data}
		for i := 0; i < len(annotations); i += 2 {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, annotations[i], annotations[i+1])
		}
		return s
	}
	// with is data() with some keys replaced: key, value, key, value...
	with := func(kv ...any) map[string][]byte {
		d := data()
		for i := 0; i < len(kv); i += 2 {
			d[kv[i].(string)] = kv[i+1].([]byte)
		}
		return d
	}

	type parts struct{ Signer, Trusted, Serving, RotateCA, RotateServing bool }
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   parts
	}{
		{"no Secret", nil, parts{}},
		{"complete", secret(data()), parts{Signer: true, Trusted: true, Serving: true}},
		{"signer that is not a CA", secret(with(SecretSignerCertKey, serving.CertPEM, SecretSignerKeyKey, serving.KeyPEM)), parts{Trusted: true, Serving: true}},
		{"signer key of another certificate", secret(with(SecretSignerKeyKey, serving.KeyPEM)), parts{Trusted: true, Serving: true}},
		{"serving key of another certificate", secret(with(SecretKeyKey, ca.KeyPEM)), parts{Signer: true, Trusted: true}},
		{"bundle that does not parse", secret(with(SecretCAKey, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))), parts{Signer: true, Serving: true}},
		{"CA rotation asked", secret(data(), api.AnnotationRotateCA, "1"), parts{Signer: true, Trusted: true, Serving: true, RotateCA: true}},
		{"CA rotation done", secret(data(), api.AnnotationRotateCA, "1", api.AnnotationRotatedCA, "1"), parts{Signer: true, Trusted: true, Serving: true}},
		{"CA rotation asked again", secret(data(), api.AnnotationRotateCA, "2", api.AnnotationRotatedCA, "1"), parts{Signer: true, Trusted: true, Serving: true, RotateCA: true}},
		{"serving rotation asked", secret(data(), api.AnnotationRotateServingCert, "x"), parts{Signer: true, Trusted: true, Serving: true, RotateServing: true}},
		{"serving rotation done", secret(data(), api.AnnotationRotateServingCert, "x", api.AnnotationRotatedServingCert, "x"), parts{Signer: true, Trusted: true, Serving: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := loadSecret(tc.secret)
			got := parts{Signer: l.signer != nil, Trusted: l.trusted != nil, Serving: l.serving != nil,
				RotateCA: l.rotateCARequested, RotateServing: l.rotateServingRequested}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parts read (-want +got):\n%s", diff)
			}
			s := l.state(true)
			if (s.Signer != nil) != tc.want.Signer || (s.Serving != nil) != tc.want.Serving ||
				s.RotateCARequested != tc.want.RotateCA || s.RotateServingRequested != tc.want.RotateServing || !s.SignerInjected {
				t.Errorf("state %+v does not carry what was read", s)
			}
		})
	}
}

// TestSecretData: the Secret's five keys, the bundle encoded in order.
func TestSecretData(t *testing.T) {
	ca, old := mustCA(t, t0, caLife), mustCA(t, t0, caLife)
	serving := mustServing(t, t0, servingLife, ca)
	want := map[string][]byte{
		"ca-signer.crt": ca.CertPEM, "ca-signer.key": ca.KeyPEM,
		"ca.crt":  append(append([]byte{}, ca.CertPEM...), old.CertPEM...),
		"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM,
	}
	if diff := cmp.Diff(want, secretData(ca, certs(ca, old), serving)); diff != "" {
		t.Errorf("secretData (-want +got):\n%s", diff)
	}
}

// TestServingFiles: the files are the serving pair, and the bundle when
// the Secret has one; a Secret without a usable pair gives none, so the
// files on disk stay.
func TestServingFiles(t *testing.T) {
	ca := mustCA(t, t0, caLife)
	serving := mustServing(t, t0, servingLife, ca)
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		want   map[string][]byte
	}{
		{"no Secret", nil, nil},
		{"no serving pair", &corev1.Secret{Data: map[string][]byte{SecretCAKey: ca.CertPEM}}, nil},
		{"key of another certificate", &corev1.Secret{Data: map[string][]byte{SecretCertKey: serving.CertPEM, SecretKeyKey: ca.KeyPEM}}, nil},
		{"pair without a bundle", &corev1.Secret{Data: map[string][]byte{SecretCertKey: serving.CertPEM, SecretKeyKey: serving.KeyPEM}},
			map[string][]byte{CertFile: serving.CertPEM, KeyFile: serving.KeyPEM}},
		{"pair and bundle", &corev1.Secret{Data: secretData(ca, certs(ca), serving)},
			map[string][]byte{CertFile: serving.CertPEM, KeyFile: serving.KeyPEM, CAFile: ca.CertPEM}},
	} {
		if diff := cmp.Diff(tc.want, servingFiles(tc.secret)); diff != "" {
			t.Errorf("%s: servingFiles (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestFileWriterReconcile: every replica copies the Secret's serving pair
// into the directory; no Secret yet (the leader creates it) and a Secret
// without a valid pair (the leader repairs it) leave the directory as it
// is, without error; a Secret that cannot be read is an error.
func TestFileWriterReconcile(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "shepherd-system", Name: DefaultSecretName}
	ca := mustCA(t, t0, caLife)
	serving := mustServing(t, t0, servingLife, ca)
	stored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: secretData(ca, certs(ca), serving)}
	reader := func(funcs interceptor.Funcs, objs ...client.Object) client.Reader {
		return interceptor.NewClient(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build(), funcs)
	}
	read := func(t *testing.T, dir, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}

	dir := t.TempDir()
	f := &fileWriter{reader: reader(interceptor.Funcs{}), key: key, dir: dir}
	if res, err := f.Reconcile(ctx, reconcile.Request{}); err != nil || res != (reconcile.Result{}) {
		t.Errorf("no Secret yet: %+v, %v; want nothing to do", res, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("no Secret yet, but the directory holds %d entries", len(entries))
	}

	f.reader = reader(interceptor.Funcs{}, stored)
	if _, err := f.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{CertFile: serving.CertPEM, KeyFile: serving.KeyPEM, CAFile: ca.CertPEM} {
		if got := read(t, dir, name); got != string(want) {
			t.Errorf("%s = %q, want the Secret's", name, got)
		}
	}

	broken := stored.DeepCopy()
	broken.Data[SecretKeyKey] = ca.KeyPEM
	f.reader = reader(interceptor.Funcs{}, broken)
	if _, err := f.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Errorf("a Secret without a valid pair: %v, want none", err)
	}
	if got := read(t, dir, KeyFile); got != string(serving.KeyPEM) {
		t.Errorf("a Secret without a valid pair replaced tls.key with %q", got)
	}

	f.reader = reader(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, errors.New("RBAC"))
	}})
	if _, err := f.Reconcile(ctx, reconcile.Request{}); err == nil || !strings.Contains(err.Error(), "reading Secret shepherd-system/shepherd-webhook-certs") {
		t.Errorf("unreadable Secret: err = %v, want one naming it", err)
	}
}
