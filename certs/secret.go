package certs

import (
	"crypto/x509"
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/shepherd-k8s/shepherd/api"
)

// Keys of the certificate Secret (type kubernetes.io/tls). tls.crt/tls.key
// and ca.crt follow the kubernetes.io/tls and cert-manager conventions; the
// signing CA's pair is shepherd's own.
const (
	SecretCertKey       = corev1.TLSCertKey       // serving certificate
	SecretKeyKey        = corev1.TLSPrivateKeyKey // serving key
	SecretCAKey         = "ca.crt"                // trust bundle: every CA the apiserver must trust
	SecretSignerCertKey = "ca-signer.crt"         // the CA that signs serving certificates
	SecretSignerKeyKey  = "ca-signer.key"
)

// loaded is the Secret's content, parsed. A part that is missing or does not
// parse is nil: Decide treats it as missing and replaces it.
type loaded struct {
	signer  *KeyPair
	trusted []*x509.Certificate
	serving *KeyPair

	rotateCARequested, rotateServingRequested bool
}

func loadSecret(s *corev1.Secret) loaded {
	var l loaded
	if s == nil {
		return l
	}
	if kp, err := ParseKeyPair(s.Data[SecretSignerCertKey], s.Data[SecretSignerKeyKey]); err == nil && kp.Cert.IsCA {
		l.signer = kp
	}
	if certs, err := ParseCertificates(s.Data[SecretCAKey]); err == nil {
		l.trusted = certs
	}
	if kp, err := ParseKeyPair(s.Data[SecretCertKey], s.Data[SecretKeyKey]); err == nil {
		l.serving = kp
	}
	a := s.Annotations
	l.rotateCARequested = a[api.AnnotationRotateCA] != "" && a[api.AnnotationRotateCA] != a[api.AnnotationRotatedCA]
	l.rotateServingRequested = a[api.AnnotationRotateServingCert] != "" &&
		a[api.AnnotationRotateServingCert] != a[api.AnnotationRotatedServingCert]
	return l
}

// state is the decision input; injected is whether every webhook
// configuration trusts the signer.
func (l loaded) state(injected bool) State {
	s := State{
		Trusted:                l.trusted,
		RotateCARequested:      l.rotateCARequested,
		RotateServingRequested: l.rotateServingRequested,
		SignerInjected:         injected,
	}
	if l.signer != nil {
		s.Signer = l.signer.Cert
	}
	if l.serving != nil {
		s.Serving = l.serving.Cert
	}
	return s
}

// secretData is the Secret's data for a signer, bundle and serving pair.
func secretData(signer *KeyPair, bundle []*x509.Certificate, serving *KeyPair) map[string][]byte {
	return map[string][]byte{
		SecretSignerCertKey: signer.CertPEM,
		SecretSignerKeyKey:  signer.KeyPEM,
		SecretCAKey:         EncodeBundle(bundle),
		SecretCertKey:       serving.CertPEM,
		SecretKeyKey:        serving.KeyPEM,
	}
}

// servingFiles is what every replica writes to the certificate directory,
// or nil when the Secret holds no usable serving pair.
func servingFiles(s *corev1.Secret) map[string][]byte {
	if s == nil {
		return nil
	}
	if _, err := ParseKeyPair(s.Data[SecretCertKey], s.Data[SecretKeyKey]); err != nil {
		return nil
	}
	files := map[string][]byte{CertFile: s.Data[SecretCertKey], KeyFile: s.Data[SecretKeyKey]}
	if ca := s.Data[SecretCAKey]; len(ca) > 0 {
		files[CAFile] = ca
	}
	return maps.Clone(files)
}
