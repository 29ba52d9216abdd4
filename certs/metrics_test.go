package certs

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestIssuerExpiryAfterCARotation: after a CA rotation the bundle holds the
// old CA (expiring first, harmless) and the new one that signed the serving
// certificate. The issuer gauge follows the new CA; the "ca" series of
// shepherd_certificate_expiration_timestamp_seconds keeps reporting the
// soonest of the bundle.
func TestIssuerExpiryAfterCARotation(t *testing.T) {
	oldCA := mustCA(t, t0, 10*24*time.Hour)
	newCA := mustCA(t, t0.Add(time.Hour), 365*24*time.Hour)
	s := mustServing(t, t0.Add(2*time.Hour), 24*time.Hour, newCA)
	dir := t.TempDir()
	bundle := bytes.Join([][]byte{oldCA.CertPEM, newCA.CertPEM}, nil)
	if _, err := WriteFiles(dir, map[string][]byte{CertFile: s.CertPEM, KeyFile: s.KeyPEM, CAFile: bundle}); err != nil {
		t.Fatal(err)
	}
	if err := ReadyChecker(dir, clocktesting.NewFakePassiveClock(t0.Add(3*time.Hour)))(nil); err != nil {
		t.Fatalf("valid pair: %v", err)
	}
	if got, want := testutil.ToFloat64(issuerExpiryGauge), float64(newCA.Cert.NotAfter.Unix()); got != want {
		t.Errorf("issuer expiry = %v, want the signing CA's %v", got, want)
	}
	if got, want := testutil.ToFloat64(expiryGauge.WithLabelValues("ca")), float64(oldCA.Cert.NotAfter.Unix()); got != want {
		t.Errorf("soonest CA expiry = %v, want the old CA's %v", got, want)
	}
}

func TestIssuerOf(t *testing.T) {
	ca, other := mustCA(t, t0, 48*time.Hour), mustCA(t, t0, 72*time.Hour)
	s := mustServing(t, t0, 24*time.Hour, ca)
	if got := issuerOf(s.Cert, []*x509.Certificate{other.Cert, ca.Cert}); got != ca.Cert {
		t.Errorf("issuerOf picked %v, want the signing CA", got)
	}
	if got := issuerOf(s.Cert, []*x509.Certificate{other.Cert}); got != nil {
		t.Errorf("issuerOf a bundle without the signer = %v, want nil", got.Subject)
	}
}
