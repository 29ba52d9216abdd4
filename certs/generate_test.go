package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, now time.Time, life time.Duration) *KeyPair {
	t.Helper()
	ca, err := GenerateCA(now, life, "shepherd-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustServing(t *testing.T, now time.Time, life time.Duration, ca *KeyPair, names ...string) *KeyPair {
	t.Helper()
	if len(names) == 0 {
		names = testNames
	}
	s, err := GenerateServing(now, life, ca, names, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var testNames = ServiceDNSNames("shepherd-webhook", "shepherd-system")

func TestGenerateCA(t *testing.T) {
	ca := mustCA(t, t0, 48*time.Hour)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA=%v BasicConstraintsValid=%v, want both true", c.IsCA, c.BasicConstraintsValid)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("MaxPathLen=%d MaxPathLenZero=%v, want a CA that signs only leaves", c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("KeyUsage %b lacks CertSign", c.KeyUsage)
	}
	if !c.NotBefore.Equal(t0.Add(-Backdate)) || !c.NotAfter.Equal(t0.Add(48*time.Hour)) {
		t.Errorf("validity [%s, %s], want [%s, %s]", c.NotBefore, c.NotAfter, t0.Add(-Backdate), t0.Add(48*time.Hour))
	}
	if !IssuedAt(c).Equal(t0) {
		t.Errorf("IssuedAt = %s, want %s", IssuedAt(c), t0)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	if len(c.SubjectKeyId) == 0 {
		t.Error("CA has no SubjectKeyId")
	}
	if _, err := GenerateCA(t0, 0, "x"); err == nil || !strings.Contains(err.Error(), "lifetime") {
		t.Errorf("zero lifetime: err = %v, want an error naming the lifetime", err)
	}
}

func TestGenerateServing(t *testing.T) {
	ca := mustCA(t, t0, 365*24*time.Hour)
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	s, err := GenerateServing(t0, 24*time.Hour, ca, testNames, ips)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cert
	wantNames := []string{
		"shepherd-webhook.shepherd-system.svc",
		"shepherd-webhook.shepherd-system.svc.cluster.local",
		"shepherd-webhook",
		"shepherd-webhook.shepherd-system",
	}
	if !slices.Equal(c.DNSNames, wantNames) {
		t.Errorf("DNSNames = %v, want %v", c.DNSNames, wantNames)
	}
	if c.Subject.CommonName != wantNames[0] {
		t.Errorf("CommonName = %q, want %q", c.Subject.CommonName, wantNames[0])
	}
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(ips[0]) {
		t.Errorf("IPAddresses = %v, want %v", c.IPAddresses, ips)
	}
	if c.IsCA {
		t.Error("serving certificate is a CA")
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage = %b, want DigitalSignature only", c.KeyUsage)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage = %v, want ServerAuth only", c.ExtKeyUsage)
	}
	if !c.NotBefore.Equal(t0.Add(-Backdate)) || !c.NotAfter.Equal(t0.Add(24*time.Hour)) {
		t.Errorf("validity [%s, %s], want [%s, %s]", c.NotBefore, c.NotAfter, t0.Add(-Backdate), t0.Add(24*time.Hour))
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range append(wantNames, "127.0.0.1") {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: t0}); err != nil {
			t.Errorf("verify for %q: %v", name, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: roots, CurrentTime: t0}); err == nil {
		t.Error("certificate verifies for a name it was not issued for")
	}
	// The apiserver's clock may be a little behind shepherd's.
	if _, err := c.Verify(x509.VerifyOptions{DNSName: wantNames[0], Roots: roots, CurrentTime: t0.Add(-Backdate / 2)}); err != nil {
		t.Errorf("verify slightly before issue: %v", err)
	}
}

func TestGenerateServingNeverOutlivesCA(t *testing.T) {
	ca := mustCA(t, t0, 10*time.Hour)
	s := mustServing(t, t0, 90*24*time.Hour, ca)
	if !s.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("serving NotAfter = %s, want capped at the CA's %s", s.Cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestGenerateServingErrors(t *testing.T) {
	ca := mustCA(t, t0, time.Hour)
	for name, tc := range map[string]struct {
		life  time.Duration
		ca    *KeyPair
		names []string
		want  string
	}{
		"zero lifetime": {0, ca, testNames, "lifetime"},
		"no CA":         {time.Hour, nil, testNames, "CA certificate and key"},
		"no names":      {time.Hour, ca, nil, "at least one DNS name"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := GenerateServing(t0, tc.life, tc.ca, tc.names, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseKeyPair(t *testing.T) {
	ca := mustCA(t, t0, time.Hour)
	s := mustServing(t, t0, time.Hour, ca)
	got, err := ParseKeyPair(s.CertPEM, s.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(s.Cert) || !got.Key.Equal(s.Key) {
		t.Error("round trip changed the pair")
	}
	if _, err := ParseKeyPair(s.CertPEM, ca.KeyPEM); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched key: err = %v, want 'does not match'", err)
	}
	if _, err := ParseKeyPair([]byte("garbage"), s.KeyPEM); err == nil {
		t.Error("garbage certificate parsed")
	}
	bundle := EncodeBundle([]*x509.Certificate{ca.Cert, s.Cert})
	certs, err := ParseCertificates(bundle)
	if err != nil || len(certs) != 2 || !certs[0].Equal(ca.Cert) || !certs[1].Equal(s.Cert) {
		t.Errorf("bundle round trip: %d certs, err %v", len(certs), err)
	}
}
