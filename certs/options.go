package certs

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/shepherd-k8s/shepherd/api"
)

// Certificate modes.
const (
	ModeSelfSigned  = "self-signed"
	ModeCertManager = "cert-manager"
)

// File names in the certificate directory: controller-runtime's webhook
// server reads tls.crt and tls.key by default.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Defaults.
const (
	DefaultNamespace         = api.DefaultNamespace
	DefaultServiceName       = "shepherd-webhook"
	DefaultSecretName        = "shepherd-webhook-certs"
	DefaultMutatingWebhook   = "defaults.shepherd.dev" // deploy/webhook/webhooks.yaml: sorts before upstream defaulters
	DefaultValidatingWebhook = "shepherd"
	DefaultCALifetime        = 2 * 365 * 24 * time.Hour
	DefaultServingLifetime   = 90 * 24 * time.Hour
	DefaultRotationFraction  = 2.0 / 3
	DefaultPropagationDelay  = time.Minute
)

// DefaultCertDir is controller-runtime's default webhook certificate
// directory; deploy/ mounts an emptyDir (self-signed) or the Secret
// (cert-manager) there.
var DefaultCertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")

// Options configures the serving certificates.
type Options struct {
	// Mode is ModeSelfSigned (default) or ModeCertManager.
	Mode string
	// Namespace is shepherd's namespace: where the Secret and the Service are.
	Namespace string
	// ServiceName is the webhook Service; the certificate is issued for its
	// in-cluster DNS names.
	ServiceName string
	// SecretName is the Secret holding the CA and the serving pair.
	SecretName string
	// CertDir is where the serving pair is written (self-signed) or mounted
	// (cert-manager), and where the webhook server reads it from.
	CertDir string
	// MutatingWebhookName and ValidatingWebhookName are shepherd's webhook
	// configurations; every webhook in them gets the CA bundle.
	MutatingWebhookName   string
	ValidatingWebhookName string
	// ExtraSANs are more DNS names or IP addresses for the serving
	// certificate, e.g. when the apiserver reaches shepherd by URL.
	ExtraSANs []string

	CALifetime              time.Duration
	ServingLifetime         time.Duration
	CARotationFraction      float64
	ServingRotationFraction float64
	// CAPropagationDelay: see Policy.PropagationDelay.
	CAPropagationDelay time.Duration
}

// DefaultOptions are the options with every default filled in; the
// namespace is the pod's own when running in a cluster.
func DefaultOptions() Options {
	return Options{
		Mode:                    ModeSelfSigned,
		Namespace:               api.OwnNamespace(),
		ServiceName:             DefaultServiceName,
		SecretName:              DefaultSecretName,
		CertDir:                 DefaultCertDir,
		MutatingWebhookName:     DefaultMutatingWebhook,
		ValidatingWebhookName:   DefaultValidatingWebhook,
		CALifetime:              DefaultCALifetime,
		ServingLifetime:         DefaultServingLifetime,
		CARotationFraction:      DefaultRotationFraction,
		ServingRotationFraction: DefaultRotationFraction,
		CAPropagationDelay:      DefaultPropagationDelay,
	}
}

// AddFlags registers the certificate flags. Unset fields get their defaults
// first, so flags show the real defaults. When fs already has --cert-dir
// (the webhook server's own flag), it is left alone and the caller copies
// its value into CertDir.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.fillDefaults()
	fs.StringVar(&o.Mode, "cert-mode", o.Mode,
		`How the webhook serving certificate is provided: "self-signed" (shepherd runs its own CA, keeps the CA and serving certificate in --cert-secret, injects the CA bundle into its webhook configurations and rotates both before they expire) or "cert-manager" (cert-manager issues the certificate and injects the CA; shepherd serves the files mounted in --cert-dir).`)
	if fs.Lookup("cert-dir") == nil {
		fs.StringVar(&o.CertDir, "cert-dir", o.CertDir,
			"Directory holding tls.crt and tls.key for the webhook server. Self-signed mode writes them there (it must be writable, e.g. an emptyDir); cert-manager mode expects the Certificate's Secret mounted there. Changes are picked up without a restart.")
	}
	fs.StringVar(&o.Namespace, "cert-namespace", o.Namespace,
		"Namespace of shepherd's Service and certificate Secret (default: $POD_NAMESPACE, else the service account's namespace).")
	fs.StringVar(&o.ServiceName, "webhook-service", o.ServiceName,
		"Name of the Service the apiserver calls the webhooks through; the serving certificate is issued for <service>.<namespace>.svc and its other in-cluster names.")
	fs.StringVar(&o.SecretName, "cert-secret", o.SecretName,
		"Self-signed mode: the Secret (in --cert-namespace) holding the CA and the serving certificate. Created if missing. Annotate it with shepherd.dev/rotate-ca=<token> or shepherd.dev/rotate-serving-cert=<token> to force a rotation.")
	fs.StringVar(&o.MutatingWebhookName, "mutating-webhook-configuration", o.MutatingWebhookName,
		"Self-signed mode: the MutatingWebhookConfiguration whose webhooks get the CA bundle.")
	fs.StringVar(&o.ValidatingWebhookName, "validating-webhook-configuration", o.ValidatingWebhookName,
		"Self-signed mode: the ValidatingWebhookConfiguration whose webhooks get the CA bundle.")
	fs.StringSliceVar(&o.ExtraSANs, "cert-extra-sans", o.ExtraSANs,
		"Self-signed mode: more DNS names or IP addresses for the serving certificate (e.g. when webhooks call shepherd by URL).")
	fs.DurationVar(&o.CALifetime, "cert-ca-lifetime", o.CALifetime,
		"Self-signed mode: lifetime of a new CA.")
	fs.DurationVar(&o.ServingLifetime, "cert-serving-lifetime", o.ServingLifetime,
		"Self-signed mode: lifetime of a new serving certificate (never past the CA's expiry).")
	fs.Float64Var(&o.CARotationFraction, "cert-ca-rotation-fraction", o.CARotationFraction,
		"Self-signed mode: replace the CA after this fraction of its lifetime (0 < f < 1). The old CA stays in the bundle until it expires, so certificates it signed keep working.")
	fs.Float64Var(&o.ServingRotationFraction, "cert-serving-rotation-fraction", o.ServingRotationFraction,
		"Self-signed mode: replace the serving certificate after this fraction of its lifetime (0 < f < 1).")
	fs.DurationVar(&o.CAPropagationDelay, "cert-ca-propagation-delay", o.CAPropagationDelay,
		"Self-signed mode: after a CA rotation, how long the new CA must have been in every webhook configuration's caBundle before the serving certificate is issued from it.")
}

func (o *Options) fillDefaults() {
	d := DefaultOptions()
	set := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	set(&o.Mode, d.Mode)
	set(&o.Namespace, d.Namespace)
	set(&o.ServiceName, d.ServiceName)
	set(&o.SecretName, d.SecretName)
	set(&o.CertDir, d.CertDir)
	set(&o.MutatingWebhookName, d.MutatingWebhookName)
	set(&o.ValidatingWebhookName, d.ValidatingWebhookName)
	if o.CALifetime == 0 {
		o.CALifetime = d.CALifetime
	}
	if o.ServingLifetime == 0 {
		o.ServingLifetime = d.ServingLifetime
	}
	if o.CARotationFraction == 0 {
		o.CARotationFraction = d.CARotationFraction
	}
	if o.ServingRotationFraction == 0 {
		o.ServingRotationFraction = d.ServingRotationFraction
	}
	if o.CAPropagationDelay == 0 {
		o.CAPropagationDelay = d.CAPropagationDelay
	}
}

// Validate reports every invalid option, naming its flag.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if o.CertDir == "" {
		bad("cert-dir", "must not be empty")
	}
	switch o.Mode {
	case ModeCertManager:
		return errors.Join(errs...)
	case ModeSelfSigned:
	default:
		bad("cert-mode", "%q is not a mode: use %q or %q", o.Mode, ModeSelfSigned, ModeCertManager)
		return errors.Join(errs...)
	}
	for flag, v := range map[string]string{
		"cert-namespace": o.Namespace, "webhook-service": o.ServiceName, "cert-secret": o.SecretName,
	} {
		if v == "" {
			bad(flag, "must not be empty in self-signed mode")
		}
	}
	if o.MutatingWebhookName == "" && o.ValidatingWebhookName == "" {
		bad("mutating-webhook-configuration", "this or --validating-webhook-configuration must name a webhook configuration to inject the CA bundle into")
	}
	if o.CALifetime <= 0 {
		bad("cert-ca-lifetime", "must be positive, got %s", o.CALifetime)
	}
	if o.ServingLifetime <= 0 {
		bad("cert-serving-lifetime", "must be positive, got %s", o.ServingLifetime)
	}
	if o.CARotationFraction <= 0 || o.CARotationFraction >= 1 {
		bad("cert-ca-rotation-fraction", "must be between 0 and 1 (exclusive), got %g", o.CARotationFraction)
	}
	if o.ServingRotationFraction <= 0 || o.ServingRotationFraction >= 1 {
		bad("cert-serving-rotation-fraction", "must be between 0 and 1 (exclusive), got %g", o.ServingRotationFraction)
	}
	if o.CAPropagationDelay < 0 {
		bad("cert-ca-propagation-delay", "must not be negative, got %s", o.CAPropagationDelay)
	}
	if o.CALifetime > 0 && o.CAPropagationDelay >= time.Duration(float64(o.CALifetime)*(1-o.CARotationFraction)) {
		bad("cert-ca-propagation-delay", "%s leaves no time to move to a new CA before the old one expires: make it shorter than (1 - --cert-ca-rotation-fraction) × --cert-ca-lifetime", o.CAPropagationDelay)
	}
	return errors.Join(errs...)
}

// policy is the decision policy the options describe.
func (o *Options) policy() Policy {
	p := Policy{
		CALifetime:              o.CALifetime,
		ServingLifetime:         o.ServingLifetime,
		CARotationFraction:      o.CARotationFraction,
		ServingRotationFraction: o.ServingRotationFraction,
		PropagationDelay:        o.CAPropagationDelay,
		DNSNames:                ServiceDNSNames(o.ServiceName, o.Namespace),
	}
	for _, san := range o.ExtraSANs {
		if ip := net.ParseIP(san); ip != nil {
			p.IPs = append(p.IPs, ip)
		} else if san != "" {
			p.DNSNames = append(p.DNSNames, san)
		}
	}
	return p
}
