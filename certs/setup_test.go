package certs

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestBootstrap: the start-up pass writes the Secret's serving pair into
// the directory; a write another replica won (conflict) is tried again on
// what it wrote; any other error ends the pass at once, naming the Secret.
func TestBootstrap(t *testing.T) {
	key := client.ObjectKey{Namespace: "shepherd-system", Name: DefaultSecretName}
	creates := 0
	lostOnce := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		creates++
		if creates == 1 {
			return apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, key.Name, errors.New("modified"))
		}
		return c.Create(ctx, obj, opts...)
	}}
	u := newAuthority(t, lostOnce, webhookConfigs()...)
	dir := t.TempDir()
	if err := bootstrap(logr.Discard(), u.authority, &fileWriter{reader: u.client, key: key, dir: dir}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if creates != 2 {
		t.Errorf("Secret created %d times, want a second try after the conflict", creates)
	}
	got, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := u.secret(t).Data[SecretCertKey]; string(got) != string(want) {
		t.Error("tls.crt is not the stored Secret's serving certificate")
	}

	gets := 0
	forbidden := interceptor.Funcs{Get: func(_ context.Context, _ client.WithWatch, k client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
		gets++
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, k.Name, errors.New("RBAC"))
	}}
	u = newAuthority(t, forbidden)
	err = bootstrap(logr.Discard(), u.authority, &fileWriter{reader: u.client, key: key, dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "preparing the serving certificate in Secret shepherd-system/shepherd-webhook-certs") || !apierrors.IsForbidden(err) {
		t.Errorf("err = %v, want the Forbidden wrapped, naming the Secret", err)
	}
	if gets != 1 {
		t.Errorf("a Forbidden was tried %d times, want once", gets)
	}
}

// TestSetupCertManagerMode: cert-manager mode touches no manager and no
// apiserver; its readiness check reads the mounted directory, the
// default one when none is given. Invalid options fail Setup before
// anything else.
func TestSetupCertManagerMode(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t, t0, 48*time.Hour)
	s := mustServing(t, t0, 24*time.Hour, ca)
	if _, err := WriteFiles(dir, map[string][]byte{CertFile: s.CertPEM, KeyFile: s.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	ready, err := Setup(nil, Options{Mode: ModeCertManager, CertDir: dir}, clocktesting.NewFakePassiveClock(t0.Add(time.Hour)))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if err := ready(nil); err != nil {
		t.Errorf("readiness with a valid mounted pair: %v", err)
	}

	ready, err = Setup(nil, Options{Mode: ModeCertManager}, clocktesting.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatalf("Setup without a directory: %v", err)
	}
	if err := ready(nil); err == nil || !strings.Contains(err.Error(), DefaultCertDir) {
		t.Errorf("readiness without a directory given: %v; want it to read %s", err, DefaultCertDir)
	}

	if _, err := Setup(nil, Options{Mode: "vault"}, nil); err == nil || !strings.Contains(err.Error(), "--cert-mode") {
		t.Errorf("an unknown mode: err = %v, want one naming --cert-mode", err)
	}
}

// TestFillDefaults: AddFlags shows, and Setup uses, the defaults for
// exactly the options left unset.
func TestFillDefaults(t *testing.T) {
	o := Options{Namespace: "ns", SecretName: "mine", ServingLifetime: time.Hour, CARotationFraction: 0.5}
	o.fillDefaults()
	want := DefaultOptions()
	want.Namespace, want.SecretName, want.ServingLifetime, want.CARotationFraction = "ns", "mine", time.Hour, 0.5
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("filled options (-want +got):\n%s", diff)
	}
}

// TestOptionsValidateReportsEveryError: every invalid option is reported
// at once, each naming its flag; cert-manager mode checks only the
// directory; an unknown mode stops before the self-signed checks.
func TestOptionsValidateReportsEveryError(t *testing.T) {
	bad := Options{Mode: ModeSelfSigned, CALifetime: -time.Hour, ServingLifetime: 0,
		CARotationFraction: 0, ServingRotationFraction: 1.5, CAPropagationDelay: -time.Second}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, flag := range []string{"--cert-dir", "--cert-namespace", "--webhook-service", "--cert-secret", "--mutating-webhook-configuration",
		"--cert-ca-lifetime", "--cert-serving-lifetime", "--cert-ca-rotation-fraction", "--cert-serving-rotation-fraction", "--cert-ca-propagation-delay"} {
		if !strings.Contains(err.Error(), flag+":") {
			t.Errorf("%s not reported in:\n%v", flag, err)
		}
	}

	cm := bad
	cm.Mode, cm.CertDir = ModeCertManager, "/certs"
	if err := cm.Validate(); err != nil {
		t.Errorf("cert-manager mode judged the self-signed options: %v", err)
	}
	cm.CertDir = ""
	if err := cm.Validate(); err == nil || !strings.Contains(err.Error(), "--cert-dir") || strings.Contains(err.Error(), "--cert-secret") {
		t.Errorf("cert-manager mode without a directory: %v; want --cert-dir alone", err)
	}

	unknown := bad
	unknown.Mode, unknown.CertDir = "vault", "/certs"
	err = unknown.Validate()
	if err == nil || !strings.Contains(err.Error(), `"vault" is not a mode`) || strings.Contains(err.Error(), "--cert-secret") {
		t.Errorf("unknown mode: %v; want the mode alone reported", err)
	}

	// Only one mutating or validating configuration is needed.
	one := DefaultOptions()
	one.Namespace, one.MutatingWebhookName = "ns", ""
	if err := one.Validate(); err != nil {
		t.Errorf("a validating configuration alone: %v", err)
	}
	// The propagation delay must leave time before the old CA expires:
	// (1 - 2/3) × 300 days is 100 days.
	one.CALifetime, one.CAPropagationDelay = caLife, 99*24*time.Hour
	if err := one.Validate(); err != nil {
		t.Errorf("a delay within the slack: %v", err)
	}
	one.CAPropagationDelay = 101 * 24 * time.Hour
	if err := one.Validate(); err == nil || !strings.Contains(err.Error(), "--cert-ca-propagation-delay") {
		t.Errorf("a delay past the slack: %v", err)
	}
}

// TestOptionsPolicy: the policy carries the lifetimes and fractions, the
// Service's names, and each extra SAN as an IP address or a DNS name
// (empty ones dropped).
func TestOptionsPolicy(t *testing.T) {
	o := Options{Namespace: "ns", ServiceName: "svc", CALifetime: caLife, ServingLifetime: servingLife,
		CARotationFraction: 0.5, ServingRotationFraction: 0.75, CAPropagationDelay: delay,
		ExtraSANs: []string{"10.0.0.1", "", "shepherd.example.com", "::1"}}
	p := o.policy()
	want := Policy{CALifetime: caLife, ServingLifetime: servingLife, CARotationFraction: 0.5, ServingRotationFraction: 0.75, PropagationDelay: delay,
		DNSNames: []string{"svc.ns.svc", "svc.ns.svc.cluster.local", "svc", "svc.ns", "shepherd.example.com"},
		IPs:      []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("::1")}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
}
