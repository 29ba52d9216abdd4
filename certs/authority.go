package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
)

// authority is the self-signed CA: it keeps the Secret valid and the CA
// bundle injected. The leader runs it as a controller; every replica runs
// one pass of it at start-up (bootstrap) so the webhook server has files to
// serve before leader election. Concurrent passes are safe: the Secret is
// patched with an optimistic lock and the injection is idempotent.
type authority struct {
	reader client.Reader
	writer client.Client
	opts   Options
	policy Policy
	clk    clock.PassiveClock
	// event, when set, reports rotations and injections.
	event func(obj client.Object, eventtype, reason, note string)
}

// Reconcile implements reconcile.Reconciler: every request means "check the
// Secret and the webhook configurations".
func (a *authority) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	requeueAfter, _, err := a.sync(ctx)
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || errors.Is(err, errRetry) {
			// Someone else wrote first (another replica's bootstrap, or an
			// edit of a webhook configuration): decide again on what they
			// wrote.
			ctrl.LoggerFrom(ctx).V(1).Info("Concurrent change; deciding again", "cause", err.Error())
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeueAfter}, nil
}

// sync makes one decision and applies it. It returns when to look again and
// the Secret as written.
func (a *authority) sync(ctx context.Context) (time.Duration, *corev1.Secret, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("secret", a.opts.Namespace+"/"+a.opts.SecretName)
	now := a.clk.Now()

	secret := &corev1.Secret{}
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: a.opts.Namespace, Name: a.opts.SecretName}, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return 0, nil, fmt.Errorf("reading Secret %s/%s: %w", a.opts.Namespace, a.opts.SecretName, err)
		}
		secret = nil
	}
	configs, err := a.webhookConfigurations(ctx)
	if err != nil {
		return 0, nil, err
	}
	l := loadSecret(secret)
	injected := l.signer != nil
	for _, c := range configs {
		injected = injected && c.trusts(l.signer)
	}
	d := Decide(now, l.state(injected), a.policy)

	signer, serving := l.signer, l.serving
	current := l.trusted
	if secret == nil {
		// The Secret is gone (deleted, or a first install): the replicas
		// may still serve a certificate from a CA that only the webhook
		// configurations remember. Keep those CAs trusted until they expire
		// so nothing fails while the replicas load the new certificate.
		for _, c := range configs {
			current = append(current, c.cas()...)
		}
	}
	if d.NewCA {
		if signer, err = GenerateCA(now, a.policy.CALifetime, a.opts.ServiceName+"."+a.opts.Namespace+"-ca"); err != nil {
			return 0, nil, err
		}
		if l.signer != nil {
			// The retired CA still vouches for the certificate every
			// replica serves until the new one is issued.
			current = append(current, l.signer.Cert)
		}
		log.Info("Issued a new CA", "reason", d.CAReason, "notAfter", signer.Cert.NotAfter)
	}
	if d.NewServing {
		if serving, err = GenerateServing(now, a.policy.ServingLifetime, signer, a.policy.DNSNames, a.policy.IPs); err != nil {
			return 0, nil, err
		}
		log.Info("Issued a new serving certificate", "reason", d.ServingReason, "notAfter", serving.Cert.NotAfter)
	}
	if d.ServingDeferred {
		log.V(1).Info("Serving certificate rotation waits for the new CA to propagate", "reason", d.ServingReason, "until", d.RequeueAt)
	}
	bundle := DesiredBundle(now, signer.Cert, current, serving.Cert)

	written, err := a.writeSecret(ctx, secret, secretData(signer, bundle, serving), l, d)
	if err != nil {
		return 0, nil, err
	}
	if secret == nil {
		a.emit(written, corev1.EventTypeNormal, api.EventCertificateSecretMade, "created the webhook CA and serving certificate")
	} else {
		if d.NewCA {
			a.emit(written, corev1.EventTypeNormal, api.EventCARotated, "new CA (%s), valid until %s", d.CAReason, signer.Cert.NotAfter.Format(time.RFC3339))
		}
		if d.NewServing {
			a.emit(written, corev1.EventTypeNormal, api.EventServingCertRotated, "new serving certificate (%s), valid until %s", d.ServingReason, serving.Cert.NotAfter.Format(time.RFC3339))
		}
	}

	bundlePEM := written.Data[SecretCAKey]
	for _, c := range configs {
		changed, err := a.inject(ctx, c, bundlePEM)
		if err != nil {
			return 0, nil, err
		}
		if changed {
			log.Info("Injected the CA bundle", "kind", c.kind, "name", c.name, "cas", len(bundle))
			a.emit(written, corev1.EventTypeNormal, api.EventCABundleInjected, "CA bundle (%d CAs) injected into %s %s", len(bundle), c.kind, c.name)
		}
	}
	return d.RequeueAt.Sub(now), written, nil
}

func (a *authority) emit(secret *corev1.Secret, eventtype, reason, format string, args ...any) {
	if a.event != nil {
		a.event(secret, eventtype, reason, fmt.Sprintf(format, args...))
	}
}

// writeSecret creates the Secret, or patches what changed in it (data and
// the rotated-* annotations) under an optimistic lock.
func (a *authority) writeSecret(ctx context.Context, secret *corev1.Secret, data map[string][]byte, l loaded, d Decision) (*corev1.Secret, error) {
	if secret == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      a.opts.SecretName,
				Namespace: a.opts.Namespace,
				Labels: map[string]string{
					"app.kubernetes.io/name":       "shepherd",
					"app.kubernetes.io/component":  "webhook-certificates",
					"app.kubernetes.io/managed-by": "shepherd",
				},
			},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}
		if err := a.writer.Create(ctx, s, client.FieldOwner(api.FieldManager)); err != nil {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		return s, nil
	}
	patched := secret.DeepCopy()
	if patched.Data == nil {
		patched.Data = map[string][]byte{}
	}
	maps.Copy(patched.Data, data)
	if d.NewCA && l.rotateCARequested {
		metav1.SetMetaDataAnnotation(&patched.ObjectMeta, api.AnnotationRotatedCA, secret.Annotations[api.AnnotationRotateCA])
	}
	if d.NewServing && l.rotateServingRequested {
		metav1.SetMetaDataAnnotation(&patched.ObjectMeta, api.AnnotationRotatedServingCert, secret.Annotations[api.AnnotationRotateServingCert])
	}
	if maps.EqualFunc(patched.Data, secret.Data, bytes.Equal) && maps.Equal(patched.Annotations, secret.Annotations) {
		return secret, nil
	}
	if err := a.writer.Patch(ctx, patched, client.MergeFromWithOptions(secret, client.MergeFromWithOptimisticLock{}), client.FieldOwner(api.FieldManager)); err != nil {
		return nil, fmt.Errorf("updating Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return patched, nil
}

// webhookConfig is one of shepherd's webhook configurations: the name of
// each webhook and its current caBundle.
type webhookConfig struct {
	kind, name string
	obj        client.Object
	webhooks   []webhookEntry
}

type webhookEntry struct {
	name     string
	caBundle []byte
}

// cas are the CA certificates of the configuration's caBundles.
func (c webhookConfig) cas() []*x509.Certificate {
	var out []*x509.Certificate
	for _, w := range c.webhooks {
		certs, err := ParseCertificates(w.caBundle)
		if err != nil {
			continue
		}
		for _, cert := range certs {
			if cert.IsCA {
				out = append(out, cert)
			}
		}
	}
	return out
}

func (c webhookConfig) trusts(signer *KeyPair) bool {
	for _, w := range c.webhooks {
		if !BundleContains(w.caBundle, signer.Cert) {
			return false
		}
	}
	return true
}

// webhookConfigurations reads shepherd's webhook configurations; one that
// does not exist (yet) is left out — the watch brings it in when created.
func (a *authority) webhookConfigurations(ctx context.Context) ([]webhookConfig, error) {
	var out []webhookConfig
	if n := a.opts.MutatingWebhookName; n != "" {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		switch err := a.reader.Get(ctx, client.ObjectKey{Name: n}, m); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", n, err)
		default:
			c := webhookConfig{kind: "MutatingWebhookConfiguration", name: n, obj: m}
			for _, w := range m.Webhooks {
				c.webhooks = append(c.webhooks, webhookEntry{w.Name, w.ClientConfig.CABundle})
			}
			out = append(out, c)
		}
	}
	if n := a.opts.ValidatingWebhookName; n != "" {
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		switch err := a.reader.Get(ctx, client.ObjectKey{Name: n}, v); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", n, err)
		default:
			c := webhookConfig{kind: "ValidatingWebhookConfiguration", name: n, obj: v}
			for _, w := range v.Webhooks {
				c.webhooks = append(c.webhooks, webhookEntry{w.Name, w.ClientConfig.CABundle})
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// inject sets every webhook's caBundle to bundle with a JSON patch; each
// entry is guarded by a test of its name, so a concurrent reordering makes
// the patch fail (and be retried) instead of touching the wrong webhook.
func (a *authority) inject(ctx context.Context, c webhookConfig, bundle []byte) (bool, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	for i, w := range c.webhooks {
		if bytes.Equal(w.caBundle, bundle) {
			continue
		}
		prefix := "/webhooks/" + strconv.Itoa(i)
		ops = append(ops,
			op{Op: "test", Path: prefix + "/name", Value: w.name},
			op{Op: "add", Path: prefix + "/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(bundle)})
	}
	if len(ops) == 0 {
		return false, nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, fmt.Errorf("encoding the caBundle patch: %w", err)
	}
	if err := a.writer.Patch(ctx, c.obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(api.FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if apierrors.IsInvalid(err) || isTestFailed(err) {
			// The configuration changed under us; the watch brings the
			// new version and the next pass injects into it.
			return false, fmt.Errorf("%w: %s %s changed while injecting the CA bundle: %w", errRetry, c.kind, c.name, err)
		}
		return false, fmt.Errorf("injecting the CA bundle into %s %s: %w", c.kind, c.name, err)
	}
	return true, nil
}

var errRetry = errors.New("retry")

// isTestFailed reports a JSON patch whose test operation failed (the
// apiserver answers 422 or 500 depending on version).
func isTestFailed(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && bytes.Contains([]byte(status.Status().Message), []byte("testing value"))
}
