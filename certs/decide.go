package certs

import (
	"bytes"
	"crypto/x509"
	"net"
	"slices"
	"time"
)

// MaxBundle caps how many CAs the trust bundle holds, so repeated forced
// rotations cannot grow it without bound. The signing CA and the issuer of
// the current serving certificate are always kept.
const MaxBundle = 4

// Policy is what the certificates must satisfy: names, lifetimes and when to
// rotate.
type Policy struct {
	CALifetime      time.Duration
	ServingLifetime time.Duration
	// CARotationFraction and ServingRotationFraction are the fractions of a
	// certificate's life after which it is replaced (2/3 by default).
	CARotationFraction      float64
	ServingRotationFraction float64
	// PropagationDelay is how long a new CA must have been in the bundle, and
	// every webhook configuration must trust it, before the serving
	// certificate is issued from it: the apiservers must have picked up the
	// new bundle first.
	PropagationDelay time.Duration
	DNSNames         []string
	IPs              []net.IP
}

// State is what the Secret and the webhook configurations hold now.
type State struct {
	// Signer is the CA that signs serving certificates; nil when missing,
	// unreadable, or its key does not match.
	Signer *x509.Certificate
	// Trusted is the current trust bundle.
	Trusted []*x509.Certificate
	// Serving is the serving certificate; nil when missing, unreadable, or
	// its key does not match.
	Serving *x509.Certificate
	// RotateCARequested and RotateServingRequested are set when an operator
	// asked for a rotation that has not happened yet.
	RotateCARequested      bool
	RotateServingRequested bool
	// SignerInjected reports whether every webhook of every existing
	// webhook configuration trusts Signer.
	SignerInjected bool
}

// Rotation reasons, as logged and used in events.
const (
	ReasonMissing     = "missing"
	ReasonExpired     = "expired"
	ReasonDue         = "due"
	ReasonRequested   = "requested"
	ReasonNames       = "names changed"
	ReasonUntrusted   = "not signed by a trusted CA"
	ReasonSignerMoved = "issued by a retired CA"
)

// Decision is what to do now and when to look again.
type Decision struct {
	// NewCA: generate a new signing CA (and add it to the bundle).
	NewCA    bool
	CAReason string
	// NewServing: issue a new serving certificate from the signing CA.
	NewServing    bool
	ServingReason string
	// ServingDeferred: the serving certificate should be replaced but the
	// signing CA has not propagated yet.
	ServingDeferred bool
	// RequeueAt is the next time a decision may change with no other event.
	RequeueAt time.Time
}

// Decide is the rotation decision: a pure function of the certificates, the
// policy and now.
func Decide(now time.Time, s State, p Policy) Decision {
	var d Decision
	d.CAReason = caReason(now, s, p)
	d.NewCA = d.CAReason != ""

	signerIssued, signerNotAfter := now, now.Add(p.CALifetime)
	if !d.NewCA {
		signerIssued, signerNotAfter = IssuedAt(s.Signer), s.Signer.NotAfter
	}
	propagatedAt := signerIssued.Add(p.PropagationDelay)
	// A serving certificate from the signer that is served now proves the
	// signer trusted already: replacing it from the same signer needs no
	// wait. Moving to a new signer waits until it has propagated.
	sameSigner := !d.NewCA && s.Serving != nil && s.Serving.CheckSignatureFrom(s.Signer) == nil
	propagated := sameSigner || (!d.NewCA && s.SignerInjected && !now.Before(propagatedAt))

	reason, urgent := servingReason(now, s, p, d.NewCA)
	d.ServingReason = reason
	switch {
	case reason == "":
	case urgent || propagated:
		// An urgent replacement cannot wait: what is served now does not work.
		d.NewServing = true
	default:
		d.ServingDeferred = true
	}

	// Next look: when the CA or the serving certificate falls due, when a
	// deferred replacement may proceed, when a CA in the bundle expires.
	next := rotateAt(signerIssued, signerNotAfter, p.CARotationFraction)
	consider := func(t time.Time) {
		if t.Before(next) {
			next = t
		}
	}
	switch {
	case d.NewServing:
		notAfter := now.Add(p.ServingLifetime)
		if notAfter.After(signerNotAfter) {
			notAfter = signerNotAfter
		}
		consider(rotateAt(now, notAfter, p.ServingRotationFraction))
	case s.Serving != nil:
		consider(rotateAt(IssuedAt(s.Serving), s.Serving.NotAfter, p.ServingRotationFraction))
	}
	if d.ServingDeferred {
		if now.Before(propagatedAt) {
			consider(propagatedAt)
		} else {
			// Waiting for the injection, which a watch event will report;
			// look again soon in case it is missed.
			consider(now.Add(max(p.PropagationDelay, time.Second)))
		}
	}
	for _, c := range s.Trusted {
		if c.NotAfter.After(now) {
			consider(c.NotAfter)
		}
	}
	if !next.After(now) {
		next = now.Add(time.Second)
	}
	d.RequeueAt = next
	return d
}

func caReason(now time.Time, s State, p Policy) string {
	switch {
	case s.Signer == nil:
		return ReasonMissing
	case !now.Before(s.Signer.NotAfter):
		return ReasonExpired
	case s.RotateCARequested:
		return ReasonRequested
	case !now.Before(rotateAt(IssuedAt(s.Signer), s.Signer.NotAfter, p.CARotationFraction)):
		return ReasonDue
	}
	return ""
}

// servingReason says why the serving certificate must be replaced, if it
// must, and whether that is urgent (what is served now does not work).
func servingReason(now time.Time, s State, p Policy, newCA bool) (reason string, urgent bool) {
	c := s.Serving
	switch {
	case c == nil:
		return ReasonMissing, true
	case !now.Before(c.NotAfter):
		return ReasonExpired, true
	case !namesMatch(c, p):
		return ReasonNames, true
	case !trustedBy(now, c, s.Trusted, s.Signer):
		return ReasonUntrusted, true
	case s.RotateServingRequested:
		return ReasonRequested, false
	case !now.Before(rotateAt(IssuedAt(c), c.NotAfter, p.ServingRotationFraction)):
		return ReasonDue, false
	case newCA || s.Signer == nil || c.CheckSignatureFrom(s.Signer) != nil:
		return ReasonSignerMoved, false
	}
	return "", false
}

// trustedBy reports whether c is signed by a valid CA of the bundle or by the
// signer (which the desired bundle always holds).
func trustedBy(now time.Time, c *x509.Certificate, bundle []*x509.Certificate, signer *x509.Certificate) bool {
	for _, ca := range append(slices.Clone(bundle), signer) {
		if ca == nil {
			continue
		}
		if ca.NotAfter.After(now) && !now.Before(ca.NotBefore) && c.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}

func namesMatch(c *x509.Certificate, p Policy) bool {
	if !sameStrings(c.DNSNames, p.DNSNames) {
		return false
	}
	if len(c.IPAddresses) != len(p.IPs) {
		return false
	}
	for _, ip := range p.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// rotateAt is issued + fraction × (notAfter − issued).
func rotateAt(issued, notAfter time.Time, fraction float64) time.Time {
	life := notAfter.Sub(issued)
	return issued.Add(time.Duration(float64(life) * fraction))
}

// DesiredBundle is the trust bundle: the signing CA first, then every other
// CA of the current bundle that is still valid, newest first, capped at
// MaxBundle — always keeping the signer and the CA that issued the serving
// certificate, so the certificate every replica serves stays trusted while
// the replicas move to a new one.
func DesiredBundle(now time.Time, signer *x509.Certificate, current []*x509.Certificate, serving *x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	seen := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(out, func(o *x509.Certificate) bool { return bytes.Equal(o.Raw, c.Raw) })
	}
	if signer != nil {
		out = append(out, signer)
	}
	var rest []*x509.Certificate
	for _, c := range current {
		if c == nil || !c.IsCA || !c.NotAfter.After(now) || seen(c) ||
			slices.ContainsFunc(rest, func(o *x509.Certificate) bool { return bytes.Equal(o.Raw, c.Raw) }) {
			continue
		}
		rest = append(rest, c)
	}
	slices.SortStableFunc(rest, func(a, b *x509.Certificate) int { return b.NotAfter.Compare(a.NotAfter) })
	// The serving certificate's issuer goes before the others so the cap
	// never drops it.
	if serving != nil {
		if i := slices.IndexFunc(rest, func(c *x509.Certificate) bool { return serving.CheckSignatureFrom(c) == nil }); i > 0 {
			issuer := rest[i]
			rest = append([]*x509.Certificate{issuer}, slices.Delete(rest, i, i+1)...)
		}
	}
	for _, c := range rest {
		if len(out) >= MaxBundle {
			break
		}
		out = append(out, c)
	}
	return out
}

// BundleContains reports whether the PEM bundle holds cert.
func BundleContains(bundlePEM []byte, cert *x509.Certificate) bool {
	certs, err := ParseCertificates(bundlePEM)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return bytes.Equal(c.Raw, cert.Raw) })
}

// ServiceDNSNames are the names a Service is reached by from inside the
// cluster: the apiserver calls <service>.<namespace>.svc.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
		service,
		service + "." + namespace,
	}
}
