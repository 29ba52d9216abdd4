package grovemodel

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	grove "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The defaulting webhook is webhook/admission/pcs/defaulting (podcliqueset.go
// for what it defaults, register.go for its name and path) as registered
// by charts/templates/pcs-defaulting-webhook-config.yaml.
const (
	// WebhookConfiguration is the MutatingWebhookConfiguration's name. It
	// sorts before shepherd's, so the apiserver calls it first.
	WebhookConfiguration = "podcliqueset-defaulting-webhook"
	// WebhookName is the name of its one webhook.
	WebhookName = "pcs.defaulting.webhooks.grove.io"

	webhookPath             = "/webhooks/default-podcliqueset"
	defaultTerminationDelay = 4 * time.Hour
)

// applyDefaults is defaultPodCliqueSet: in each spec.template.cliques[].spec,
// podSpec.restartPolicy Always, podSpec.terminationGracePeriodSeconds 30,
// replicas 1 for 0, minAvailable and autoScalingConfig.minReplicas the
// replicas asked for (so a clique asking 0 gets minAvailable 0, which
// Grove's validating webhook, not modelled, rejects); a scaling group's
// scaleConfig.minReplicas its replicas; spec.template.terminationDelay 4h;
// spec.template.headlessServiceConfig.publishNotReadyAddresses true; and
// metadata.namespace default when empty.
func applyDefaults(pcs *grove.PodCliqueSet) {
	if pcs.Namespace == "" {
		pcs.Namespace = metav1.NamespaceDefault
	}
	t := &pcs.Spec.Template
	for _, c := range t.Cliques {
		if c == nil {
			continue
		}
		ps := &c.Spec.PodSpec
		if ps.RestartPolicy == "" {
			ps.RestartPolicy = corev1.RestartPolicyAlways
		}
		if ps.TerminationGracePeriodSeconds == nil {
			ps.TerminationGracePeriodSeconds = ptr.To[int64](30)
		}
		asked := c.Spec.Replicas
		if c.Spec.Replicas == 0 {
			c.Spec.Replicas = 1
		}
		if c.Spec.MinAvailable == nil {
			c.Spec.MinAvailable = ptr.To(asked)
		}
		if c.Spec.ScaleConfig != nil && c.Spec.ScaleConfig.MinReplicas == nil {
			c.Spec.ScaleConfig.MinReplicas = ptr.To(asked)
		}
	}
	for i := range t.PodCliqueScalingGroupConfigs {
		g := &t.PodCliqueScalingGroupConfigs[i]
		if g.ScaleConfig != nil && g.ScaleConfig.MinReplicas == nil && g.Replicas != nil {
			g.ScaleConfig.MinReplicas = ptr.To(*g.Replicas)
		}
	}
	if t.TerminationDelay == nil {
		t.TerminationDelay = &metav1.Duration{Duration: defaultTerminationDelay}
	}
	if t.HeadlessServiceConfig == nil {
		t.HeadlessServiceConfig = &grove.HeadlessServiceConfig{PublishNotReadyAddresses: true}
	}
}

// defaultPCS answers an admission request the way controller-runtime's
// CustomDefaulter (admission.WithCustomDefaulter, which Grove uses) does:
// decode into the Go types, default, and patch from the request's JSON to
// the defaulted object's — so fields the Go types render differently (an
// added `resources: {}`, a canonical quantity) are patched too — less the
// removals that decoding alone causes (fields the types do not know).
func defaultPCS(_ context.Context, req admission.Request) admission.Response {
	if req.Operation == admissionv1.Delete {
		return admission.Allowed("")
	}
	var pcs grove.PodCliqueSet
	if err := json.Unmarshal(req.Object.Raw, &pcs); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	decoded, err := json.Marshal(&pcs)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	applyDefaults(&pcs)
	defaulted, err := json.Marshal(&pcs)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if bytes.Equal(decoded, defaulted) {
		return admission.Allowed("")
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, defaulted)
	byDecoding, err := jsonpatch.CreatePatch(req.Object.Raw, decoded)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp.Patches = slices.DeleteFunc(resp.Patches, func(p jsonpatch.Operation) bool {
		return p.Operation == "remove" && slices.ContainsFunc(byDecoding, func(d jsonpatch.Operation) bool {
			return d.Operation == "remove" && d.Path == p.Path
		})
	})
	if len(resp.Patches) == 0 {
		resp.PatchType = nil
	}
	return resp
}

// serveWebhook serves defaultPCS over HTTPS on 127.0.0.1, registers it as
// the chart does but by loopback URL with its CA, and waits until the
// apiserver calls it (it picks configurations up asynchronously).
func (o *Operator) serveWebhook(ctx context.Context) error {
	now := time.Now()
	ca, err := certs.GenerateCA(now, 24*time.Hour, "grovemodel webhook CA")
	if err != nil {
		return err
	}
	serving, err := certs.GenerateServing(now, 24*time.Hour, ca, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		return fmt.Errorf("loading the webhook's serving pair: %w", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("listening for the webhook: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(webhookPath, &admission.Webhook{Handler: admission.HandlerFunc(defaultPCS)})
	o.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.server.Serve(ln) }()

	url, scope := "https://"+ln.Addr().String()+webhookPath, admissionregistrationv1.NamespacedScope
	if err := o.admin.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfiguration},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookName, AdmissionReviewVersions: []string{"v1"},
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Exact),
			NamespaceSelector: &metav1.LabelSelector{}, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds: ptr.To[int32](10),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"grove.io"}, APIVersions: []string{"v1alpha1"},
					Resources: []string{"podcliquesets"}, Scope: &scope},
			}},
		}},
	}); err != nil {
		return fmt.Errorf("registering %s: %w", WebhookConfiguration, err)
	}
	var last error
	if err := testkit.Poll(100*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		probe := newObj("PodCliqueSet")
		probe.SetNamespace(metav1.NamespaceDefault)
		probe.SetGenerateName("grovemodel-probe-")
		probe.Object["spec"] = map[string]any{"template": map[string]any{"cliques": []any{map[string]any{"name": "probe",
			"spec": map[string]any{"roleName": "probe", "replicas": int64(1), "podSpec": map[string]any{"containers": []any{
				map[string]any{"name": "probe", "image": "probe"}}}}}}}}
		if last = o.admin.Create(ctx, probe, client.DryRunAll); last != nil {
			return false, nil
		}
		_, called, _ := unstructured.NestedFieldNoCopy(probe.Object, "spec", "template", "terminationDelay")
		return called, nil
	}); err != nil {
		return fmt.Errorf("waiting for the apiserver to call %s (last dry run: %v): %w", WebhookConfiguration, last, err)
	}
	return nil
}

func (o *Operator) unregisterWebhook() error {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: WebhookConfiguration}}
	return client.IgnoreNotFound(o.admin.Delete(context.Background(), cfg))
}
