package certs

import (
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// issuerExpiryGauge is when the CA that signed the serving certificate
// expires. shepherd_certificate_expiration_timestamp_seconds{certificate="ca"}
// is the soonest CA of the bundle, which after a CA rotation is the old CA
// kept only until it expires (by design, harmless): an alert on the CA
// lifetime needs the one the apiserver actually verifies against.
var issuerExpiryGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "shepherd_certificate_issuer_expiration_timestamp_seconds",
	Help: "When the CA of the bundle that signed the serving certificate expires, as a Unix time (absent when no CA of the bundle signed it).",
})

func init() { metrics.Registry.MustRegister(issuerExpiryGauge) }

// observeIssuerExpiry sets issuerExpiryGauge from the CA among cas that
// signed leaf; when none did, it leaves the gauge alone (the serving
// certificate is then not trusted through this bundle, which the webhook
// configurations' caBundle tells, not this metric).
func observeIssuerExpiry(leaf *x509.Certificate, cas []*x509.Certificate) {
	if ca := issuerOf(leaf, cas); ca != nil {
		issuerExpiryGauge.Set(float64(ca.NotAfter.Unix()))
	}
}

// issuerOf is the certificate of cas whose key signed leaf (the latest to
// expire, should a re-issued CA share the key), or nil.
func issuerOf(leaf *x509.Certificate, cas []*x509.Certificate) *x509.Certificate {
	var found *x509.Certificate
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca) == nil && (found == nil || ca.NotAfter.After(found.NotAfter)) {
			found = ca
		}
	}
	return found
}
