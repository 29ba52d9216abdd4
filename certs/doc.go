// Package certs keeps shepherd's webhook serving certificate valid for as long
// as shepherd runs (docs/install.md, "Serving certificates").
//
// In self-signed mode (the default) shepherd is its own certificate
// authority. The state lives in one Secret in shepherd's namespace: the
// signing CA (ca-signer.crt/.key), the trust bundle (ca.crt: the signing CA
// plus every older CA that is still valid) and the serving pair
// (tls.crt/tls.key, ECDSA P-256, for <service>.<namespace>.svc and its other
// in-cluster names). The leader replica
//
//   - creates the Secret, or repairs it when something in it is missing or
//     invalid;
//   - rotates the serving certificate at a fraction (2/3 by default) of its
//     life, and the CA at a fraction of its own, long before it expires;
//   - injects the trust bundle into every webhook of shepherd's
//     Mutating- and ValidatingWebhookConfiguration, and injects it again when
//     someone changes them.
//
// A CA rotation is staged so that no admission fails: the new CA first joins
// the bundle next to the old one; only once every webhook configuration
// trusts it and the propagation delay has passed is the serving certificate
// re-issued from it. The old CA stays in the bundle until it expires. If the
// Secret is deleted, the new bundle keeps the CAs the webhook configurations
// still hold, for the same reason.
//
// Every replica, leader or not, writes the Secret's serving pair into the
// certificate directory with an atomic symlink swap (as the kubelet does for
// Secret volumes), so controller-runtime's certwatcher in the webhook server
// hot-reloads it without a restart.
//
// In cert-manager mode cert-manager issues the certificate and injects the CA
// (deploy/cert-manager); shepherd only serves the mounted files.
//
// The decisions — when to rotate what, and what the bundle must hold — are
// pure functions of the certificates and a clock (Decide, DesiredBundle);
// everything else applies them. An operator can force a rotation by
// annotating the Secret (api.AnnotationRotateCA,
// api.AnnotationRotateServingCert).
package certs
