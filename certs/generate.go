package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Backdate is how far before its issue time a certificate's NotBefore lies,
// so that an apiserver whose clock is slightly behind shepherd's accepts a
// certificate the moment it is issued. IssuedAt undoes it.
const Backdate = time.Minute

// KeyPair is a certificate with its private key, parsed and PEM-encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// IssuedAt is when shepherd issued cert: its NotBefore plus Backdate.
func IssuedAt(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(Backdate) }

// GenerateCA creates a self-signed CA valid from now for lifetime.
func GenerateCA(now time.Time, lifetime time.Duration, commonName string) (*KeyPair, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("CA lifetime must be positive, got %s", lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// The CA signs only leaf certificates.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		// SubjectKeyId is left empty: crypto/x509 derives it from the key for
		// a CA, and the certificates it signs carry it as AuthorityKeyId.
	}
	return sign(tmpl, tmpl, key, key)
}

// GenerateServing creates a serving certificate signed by ca for the given
// DNS names and IP addresses, valid from now for lifetime but never past the
// CA's own expiry (a certificate cannot outlive the CA that vouches for it).
func GenerateServing(now time.Time, lifetime time.Duration, ca *KeyPair, dnsNames []string, ips []net.IP) (*KeyPair, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("serving certificate lifetime must be positive, got %s", lifetime)
	}
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, errors.New("signing a serving certificate needs a CA certificate and key")
	}
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, errors.New("a serving certificate needs at least one DNS name or IP address")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the serving key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	cn := ""
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     notAfter,
		// ECDSA keys sign; they never encipher keys, so no KeyEncipherment.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		DNSNames:              slices.Clone(dnsNames),
		IPAddresses:           slices.Clone(ips),
	}
	return sign(tmpl, ca.Cert, key, ca.Key)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate just signed: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key: %w", err)
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil // never zero
}

// ParseKeyPair parses a PEM certificate and its PEM private key and checks
// that they belong together.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate in the PEM data")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the private key data")
	}
	key, err := parsePrivateKey(block)
	if err != nil {
		return nil, err
	}
	pub, ok := certs[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("the private key does not match the certificate")
	}
	return &KeyPair{Cert: certs[0], Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func parsePrivateKey(block *pem.Block) (*ecdsa.PrivateKey, error) {
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing the EC private key: %w", err)
		}
		return key, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing the PKCS#8 private key: %w", err)
		}
		key, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("the private key is a %T, shepherd's certificates use ECDSA", k)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("unexpected PEM block %q for a private key", block.Type)
	}
}

// ParseCertificates parses every CERTIFICATE block of a PEM bundle.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate %d of the bundle: %w", len(out)+1, err)
		}
		out = append(out, cert)
	}
	return out, nil
}

// EncodeBundle PEM-encodes certificates in order.
func EncodeBundle(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}
