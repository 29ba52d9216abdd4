package certs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
)

// authorityOptions are the options every authority test runs with: the
// defaults in shepherd-system, with the lifetimes of decide_test.go's
// testPolicy so that the requeue times are those its cases work out.
func authorityOptions() Options {
	o := DefaultOptions()
	o.Namespace = "shepherd-system"
	o.CALifetime, o.ServingLifetime, o.CAPropagationDelay = caLife, servingLife, delay
	return o
}

// webhookConfigs are shepherd's two webhook configurations as installed:
// two mutating webhooks and one validating, no caBundle yet.
func webhookConfigs() []client.Object {
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultMutatingWebhook},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.shepherd.dev"}, {Name: "b.shepherd.dev"}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultValidatingWebhook},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "v.shepherd.dev"}},
		},
	}
}

// authorityUnderTest is an authority over a fake apiserver, on a fake
// clock, recording the reasons of the Events it writes.
type authorityUnderTest struct {
	*authority
	client client.WithWatch
	clk    *clocktesting.FakePassiveClock
	events []string
}

func newAuthority(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *authorityUnderTest {
	t.Helper()
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build(), funcs)
	o := authorityOptions()
	u := &authorityUnderTest{client: c, clk: clocktesting.NewFakePassiveClock(t0)}
	u.authority = &authority{reader: c, writer: c, opts: o, policy: o.policy(), clk: u.clk,
		event: func(_ client.Object, _, reason, _ string) { u.events = append(u.events, reason) }}
	return u
}

// takeEvents returns the Events' reasons since the last call.
func (u *authorityUnderTest) takeEvents() []string {
	e := u.events
	u.events = nil
	return e
}

func (u *authorityUnderTest) mustSync(t *testing.T) (time.Duration, *corev1.Secret) {
	t.Helper()
	after, s, err := u.sync(context.Background())
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	return after, s
}

func (u *authorityUnderTest) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := u.client.Get(context.Background(), client.ObjectKey{Namespace: "shepherd-system", Name: DefaultSecretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// bundles are the caBundles of every webhook, "kind/webhook" → bundle.
func (u *authorityUnderTest) bundles(t *testing.T) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := u.client.Get(ctx, client.ObjectKey{Name: DefaultMutatingWebhook}, m); err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Webhooks {
		out["mutating/"+w.Name] = w.ClientConfig.CABundle
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := u.client.Get(ctx, client.ObjectKey{Name: DefaultValidatingWebhook}, v); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		out["validating/"+w.Name] = w.ClientConfig.CABundle
	}
	return out
}

// annotate sets annotations on the stored Secret, as an operator would.
func (u *authorityUnderTest) annotate(t *testing.T, kv ...string) {
	t.Helper()
	s := u.secret(t)
	for i := 0; i < len(kv); i += 2 {
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, kv[i], kv[i+1])
	}
	if err := u.client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestAuthorityCreatesSecretAndInjectsBundle: on a first install the
// authority creates the Secret (type TLS, shepherd's labels) with a CA and
// a serving certificate from it for the Service's names, injects the
// bundle into every webhook of both configurations, and looks again when
// the serving certificate falls due; a second pass on the same state
// writes nothing.
func TestAuthorityCreatesSecretAndInjectsBundle(t *testing.T) {
	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()...)
	after, written := u.mustSync(t)
	if after != 20*24*time.Hour {
		t.Errorf("requeue after %v, want 20 days (2/3 of the serving certificate's 30)", after)
	}
	if diff := cmp.Diff([]string{api.EventCertificateSecretMade, api.EventCABundleInjected, api.EventCABundleInjected}, u.takeEvents()); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}

	s := u.secret(t)
	if s.Type != corev1.SecretTypeTLS || s.Labels["app.kubernetes.io/managed-by"] != "shepherd" || s.Labels["app.kubernetes.io/component"] != "webhook-certificates" {
		t.Errorf("Secret type %q labels %v, want kubernetes.io/tls managed by shepherd", s.Type, s.Labels)
	}
	if !bytes.Equal(s.Data[SecretCAKey], written.Data[SecretCAKey]) {
		t.Error("sync returned a Secret other than the one stored")
	}
	l := loadSecret(s)
	if l.signer == nil || l.serving == nil {
		t.Fatalf("stored Secret lacks a signer (%v) or a serving pair (%v)", l.signer != nil, l.serving != nil)
	}
	if err := l.serving.Cert.CheckSignatureFrom(l.signer.Cert); err != nil {
		t.Errorf("serving certificate not signed by the Secret's CA: %v", err)
	}
	if diff := cmp.Diff(testNames, l.serving.Cert.DNSNames); diff != "" {
		t.Errorf("serving certificate names (-want +got):\n%s", diff)
	}
	if len(l.trusted) != 1 || !l.trusted[0].Equal(l.signer.Cert) {
		t.Errorf("ca.crt holds %d certificates, want just the signer", len(l.trusted))
	}
	for name, b := range u.bundles(t) {
		if !bytes.Equal(b, s.Data[SecretCAKey]) {
			t.Errorf("%s caBundle is not the Secret's ca.crt", name)
		}
	}

	rv := s.ResourceVersion
	if after, _ := u.mustSync(t); after != 20*24*time.Hour {
		t.Errorf("second pass: requeue after %v, want 20 days", after)
	}
	if e := u.takeEvents(); len(e) != 0 {
		t.Errorf("second pass on the same state wrote Events %v", e)
	}
	if got := u.secret(t).ResourceVersion; got != rv {
		t.Errorf("second pass on the same state wrote the Secret (resourceVersion %s → %s)", rv, got)
	}
}

// TestAuthorityForcedRotations: the rotate-ca annotation brings a new CA
// into the bundle beside the old one while the serving certificate stays
// (the new CA has not propagated); past the propagation delay the serving
// certificate is issued from the new CA. Each rotation records its token
// in the rotated-* annotation, so the same token does not rotate again.
func TestAuthorityForcedRotations(t *testing.T) {
	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()...)
	u.mustSync(t)
	u.takeEvents()
	before := loadSecret(u.secret(t))

	u.clk.SetTime(t0.Add(time.Hour))
	u.annotate(t, api.AnnotationRotateCA, "token-1")
	after, _ := u.mustSync(t)
	if after != delay {
		t.Errorf("after a CA rotation: requeue after %v, want the propagation delay %v", after, delay)
	}
	if diff := cmp.Diff([]string{api.EventCARotated, api.EventCABundleInjected, api.EventCABundleInjected}, u.takeEvents()); diff != "" {
		t.Errorf("CA rotation Events (-want +got):\n%s", diff)
	}
	s := u.secret(t)
	mid := loadSecret(s)
	if mid.signer.Cert.Equal(before.signer.Cert) {
		t.Fatal("rotate-ca did not replace the signer")
	}
	if len(mid.trusted) != 2 || !mid.trusted[0].Equal(mid.signer.Cert) || !mid.trusted[1].Equal(before.signer.Cert) {
		t.Errorf("bundle after a CA rotation holds %d certificates; want the new CA then the old", len(mid.trusted))
	}
	if !mid.serving.Cert.Equal(before.serving.Cert) {
		t.Error("serving certificate replaced before the new CA propagated")
	}
	if got := s.Annotations[api.AnnotationRotatedCA]; got != "token-1" {
		t.Errorf("%s = %q, want token-1", api.AnnotationRotatedCA, got)
	}
	for name, b := range u.bundles(t) {
		if !BundleContains(b, mid.signer.Cert) || !BundleContains(b, before.signer.Cert) {
			t.Errorf("%s caBundle does not trust both CAs", name)
		}
	}

	u.clk.SetTime(t0.Add(time.Hour + delay))
	u.mustSync(t)
	if diff := cmp.Diff([]string{api.EventServingCertRotated}, u.takeEvents()); diff != "" {
		t.Errorf("after the propagation delay, Events (-want +got):\n%s", diff)
	}
	done := loadSecret(u.secret(t))
	if !done.signer.Cert.Equal(mid.signer.Cert) {
		t.Error("the token already handled rotated the CA again")
	}
	if err := done.serving.Cert.CheckSignatureFrom(mid.signer.Cert); err != nil {
		t.Errorf("serving certificate not issued from the new CA: %v", err)
	}

	u.annotate(t, api.AnnotationRotateServingCert, "token-2")
	u.mustSync(t)
	if diff := cmp.Diff([]string{api.EventServingCertRotated}, u.takeEvents()); diff != "" {
		t.Errorf("rotate-serving-cert Events (-want +got):\n%s", diff)
	}
	s = u.secret(t)
	last := loadSecret(s)
	if last.serving.Cert.Equal(done.serving.Cert) || !last.signer.Cert.Equal(done.signer.Cert) {
		t.Error("rotate-serving-cert: want a new serving certificate from the same CA")
	}
	if got := s.Annotations[api.AnnotationRotatedServingCert]; got != "token-2" {
		t.Errorf("%s = %q, want token-2", api.AnnotationRotatedServingCert, got)
	}
}

// TestAuthorityKeepsConfigurationsCAsWhenSecretDeleted: with the Secret
// gone, the replicas still serve the certificate of a CA only the webhook
// configurations remember; the new bundle keeps that CA.
func TestAuthorityKeepsConfigurationsCAsWhenSecretDeleted(t *testing.T) {
	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()...)
	u.mustSync(t)
	old := loadSecret(u.secret(t))
	if err := u.client.Delete(context.Background(), u.secret(t)); err != nil {
		t.Fatal(err)
	}
	u.takeEvents()

	u.clk.SetTime(t0.Add(time.Hour))
	u.mustSync(t)
	if got := u.takeEvents(); len(got) == 0 || got[0] != api.EventCertificateSecretMade {
		t.Errorf("Events %v, want the Secret's creation first", got)
	}
	l := loadSecret(u.secret(t))
	if l.signer.Cert.Equal(old.signer.Cert) {
		t.Fatal("a new Secret reused the old signer, whose key was lost")
	}
	if len(l.trusted) != 2 || !l.trusted[0].Equal(l.signer.Cert) || !l.trusted[1].Equal(old.signer.Cert) {
		t.Errorf("bundle holds %d certificates; want the new CA then the one the configurations trusted", len(l.trusted))
	}
}

// TestAuthorityReconcileRequeuesConcurrentWrites: a write that lost to
// another replica or an edit (conflict, already exists, a changed webhook
// configuration) is decided again shortly, not reported; any other error
// is returned for the controller's back-off.
func TestAuthorityReconcileRequeuesConcurrentWrites(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	for _, tc := range []struct {
		name    string
		funcs   interceptor.Funcs
		want    reconcile.Result
		wantErr string
	}{{
		name: "another replica created the Secret first",
		funcs: interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewAlreadyExists(gr, DefaultSecretName)
		}},
		want: reconcile.Result{RequeueAfter: 100 * time.Millisecond},
	}, {
		name: "the Secret changed since it was read",
		funcs: interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewConflict(gr, DefaultSecretName, errors.New("modified"))
		}},
		want: reconcile.Result{RequeueAfter: 100 * time.Millisecond},
	}, {
		name: "a webhook configuration changed while injecting",
		funcs: interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
				return apierrors.NewInvalid(schema.GroupKind{Kind: "ValidatingWebhookConfiguration"}, DefaultValidatingWebhook, nil)
			}
			return c.Patch(ctx, obj, p, opts...)
		}},
		want: reconcile.Result{RequeueAfter: 100 * time.Millisecond},
	}, {
		name: "the Secret cannot be read",
		funcs: interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				return apierrors.NewForbidden(gr, key.Name, errors.New("RBAC"))
			}
			return c.Get(ctx, key, obj, opts...)
		}},
		wantErr: "reading Secret shepherd-system/shepherd-webhook-certs",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAuthority(t, tc.funcs, webhookConfigs()...)
			got, err := u.Reconcile(context.Background(), reconcile.Request{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Reconcile = %+v, %v; want %+v, nil", got, err, tc.want)
			}
		})
	}

	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()...)
	got, err := u.Reconcile(context.Background(), reconcile.Request{})
	if err != nil || got.RequeueAfter != 20*24*time.Hour {
		t.Errorf("a clean pass: Reconcile = %+v, %v; want a requeue when the serving certificate falls due", got, err)
	}
}

// TestAuthorityInject: only the webhooks whose caBundle differs are
// patched, each add guarded by a test of the webhook's name; a
// configuration deleted meanwhile is no error; a patch the configuration
// refused because it changed is a retry; any other error names the
// configuration.
func TestAuthorityInject(t *testing.T) {
	bundle := []byte("bundle")
	cfg := webhookConfig{kind: "MutatingWebhookConfiguration", name: DefaultMutatingWebhook,
		obj:      &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: DefaultMutatingWebhook}},
		webhooks: []webhookEntry{{"a.shepherd.dev", bundle}, {"b.shepherd.dev", []byte("old")}}}

	var sent []map[string]any
	u := newAuthority(t, interceptor.Funcs{Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, p client.Patch, _ ...client.PatchOption) error {
		data, err := p.Data(obj)
		if err != nil {
			return err
		}
		return json.Unmarshal(data, &sent)
	}})
	changed, err := u.inject(context.Background(), cfg, bundle)
	if err != nil || !changed {
		t.Fatalf("inject = %v, %v; want changed", changed, err)
	}
	want := []map[string]any{
		{"op": "test", "path": "/webhooks/1/name", "value": "b.shepherd.dev"},
		{"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "YnVuZGxl"}, // base64("bundle")
	}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("JSON patch (-want +got):\n%s", diff)
	}

	sent = nil
	same := cfg
	same.webhooks = []webhookEntry{{"a.shepherd.dev", bundle}}
	if changed, err := u.inject(context.Background(), same, bundle); err != nil || changed || sent != nil {
		t.Errorf("every webhook already holds the bundle: changed=%v err=%v patch=%v; want no patch", changed, err, sent)
	}

	gk := schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}
	for _, tc := range []struct {
		name      string
		err       error
		wantErr   bool
		wantRetry bool
	}{
		{"deleted meanwhile", apierrors.NewNotFound(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, DefaultMutatingWebhook), false, false},
		{"webhooks reordered (422)", apierrors.NewInvalid(gk, DefaultMutatingWebhook, nil), true, true},
		{"test operation failed (500)", apierrors.NewInternalError(errors.New(`the server rejected our request due to an error in our request: testing value /webhooks/1/name failed`)), true, true},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, DefaultMutatingWebhook, errors.New("RBAC")), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAuthority(t, interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
				return tc.err
			}})
			changed, err := u.inject(context.Background(), cfg, bundle)
			if changed || (err != nil) != tc.wantErr || errors.Is(err, errRetry) != tc.wantRetry {
				t.Errorf("inject = %v, %v; want error %v, retry %v", changed, err, tc.wantErr, tc.wantRetry)
			}
			if err != nil && !strings.Contains(err.Error(), "MutatingWebhookConfiguration "+DefaultMutatingWebhook) {
				t.Errorf("error %q does not name the configuration", err)
			}
		})
	}
}

// TestWebhookConfigurations: a configuration not named is not read, one
// not installed is left out, one that cannot be read is an error naming
// it; the configuration's webhooks come with their caBundles.
func TestWebhookConfigurations(t *testing.T) {
	ctx := context.Background()
	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()[0])
	got, err := u.webhookConfigurations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].kind != "MutatingWebhookConfiguration" || len(got[0].webhooks) != 2 || got[0].webhooks[1].name != "b.shepherd.dev" {
		t.Errorf("with only the mutating configuration installed: %+v", got)
	}

	var asked []string
	u = newAuthority(t, interceptor.Funcs{Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
		asked = append(asked, key.Name)
		return apierrors.NewForbidden(schema.GroupResource{Resource: "validatingwebhookconfigurations"}, key.Name, errors.New("RBAC"))
	}})
	u.opts.MutatingWebhookName = ""
	if _, err := u.webhookConfigurations(ctx); err == nil || !strings.Contains(err.Error(), "reading ValidatingWebhookConfiguration shepherd") {
		t.Errorf("err = %v, want one naming the ValidatingWebhookConfiguration", err)
	}
	if diff := cmp.Diff([]string{DefaultValidatingWebhook}, asked); diff != "" {
		t.Errorf("configurations read (-want +got):\n%s", diff)
	}
}

// TestIsTestFailed: the JSON patch's failed test is recognised by the
// apiserver's message, whatever the status code.
func TestIsTestFailed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewInternalError(errors.New("testing value /webhooks/0/name failed")), true},
		{apierrors.NewBadRequest("testing value /webhooks/0/name failed"), true},
		{apierrors.NewInternalError(errors.New("etcd timeout")), false},
		{errors.New("testing value /webhooks/0/name failed"), false}, // not from the apiserver
		{nil, false},
	} {
		if got := isTestFailed(tc.err); got != tc.want {
			t.Errorf("isTestFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestAuthorityKeepsRetiredSignerTrusted: a CA rotation keeps the retired
// signer in the bundle, the CA of the certificate every replica serves,
// even when the Secret's bundle no longer lists it (ca.crt lost).
func TestAuthorityKeepsRetiredSignerTrusted(t *testing.T) {
	u := newAuthority(t, interceptor.Funcs{}, webhookConfigs()...)
	u.mustSync(t)
	old := loadSecret(u.secret(t))
	s := u.secret(t)
	delete(s.Data, SecretCAKey)
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, api.AnnotationRotateCA, "1")
	if err := u.client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}

	u.clk.SetTime(t0.Add(time.Hour))
	u.mustSync(t)
	l := loadSecret(u.secret(t))
	if l.signer.Cert.Equal(old.signer.Cert) {
		t.Fatal("rotate-ca did not replace the signer")
	}
	if len(l.trusted) != 2 || !l.trusted[1].Equal(old.signer.Cert) {
		t.Errorf("bundle holds %d certificates; want the new CA and the retired one", len(l.trusted))
	}
}
