// Package certs_test runs shepherd's self-signed certificate authority
// (package certs) against a real kube-apiserver: the apiserver must call
// webhooks served with the certificates shepherd issued, through every
// rotation, without a single failed admission.
package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

const (
	pollTimeout = 60 * time.Second
	// selectLabel marks the namespaces the test webhooks apply to, so they
	// never intercept anything else.
	selectLabel = "certs-test"
)

// testEnv is one test's shepherd: its namespace, its webhook
// configurations and the namespace whose ConfigMaps they admit.
type testEnv struct {
	system, workloads string
	opts              certs.Options
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	ctx := context.Background()
	system := env.Namespace(t)
	workloads := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "workloads-", Labels: map[string]string{selectLabel: system}}}
	if err := env.Client.Create(ctx, workloads); err != nil {
		t.Fatal(err)
	}
	opts := certs.DefaultOptions()
	opts.Namespace = system
	opts.ServiceName = "shepherd-webhook"
	opts.SecretName = "shepherd-webhook-certs"
	opts.MutatingWebhookName = system + "-mutating"
	opts.ValidatingWebhookName = system + "-validating"
	// The apiserver reaches the test's webhook servers by URL on loopback.
	opts.ExtraSANs = []string{"127.0.0.1"}
	opts.CAPropagationDelay = 2 * time.Second
	return &testEnv{system: system, workloads: workloads.Name, opts: opts}
}

// webhookConfigs creates the mutating and validating configurations, two
// webhooks each, with no caBundle: until shepherd injects one, every
// admission in the workloads namespace fails. mutatingURL and validatingURL
// may point at different replicas.
func (e *testEnv) webhookConfigs(t *testing.T, mutatingURL, validatingURL string) {
	t.Helper()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{selectLabel: e.system}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
		},
	}}
	url := func(base, path string) *string { return ptr.To(base + path) }
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: e.opts.MutatingWebhookName}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: e.opts.ValidatingWebhookName}}
	for i := range 2 {
		name := fmt.Sprintf("w%d.certs.shepherd.dev", i)
		m.Webhooks = append(m.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url(mutatingURL, "/mutate")},
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       sel,
			TimeoutSeconds:          ptr.To[int32](5),
		})
		v.Webhooks = append(v.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url(validatingURL, "/validate")},
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       sel,
			TimeoutSeconds:          ptr.To[int32](5),
		})
	}
	ctx := context.Background()
	for _, obj := range []client.Object{m, v} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
}

// replica is one shepherd replica: a manager with certs.Setup and a
// webhook server on loopback serving from its own certificate directory.
type replica struct {
	name     string
	url      string
	port     int
	certDir  string
	ready    healthz.Checker
	admitted atomic.Int64 // admission requests answered
}

func newReplica(t *testing.T, name string) *replica {
	t.Helper()
	port := cluster.FreePort()
	return &replica{name: name, port: port, url: "https://127.0.0.1:" + strconv.Itoa(port), certDir: t.TempDir()}
}

// start runs the replica until the test ends.
func (r *replica) start(t *testing.T, e *testEnv) {
	t.Helper()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: r.port, CertDir: r.certDir})
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		WebhookServer:                 srv,
		LeaderElection:                true,
		LeaderElectionID:              "certs-test",
		LeaderElectionNamespace:       e.system,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        ctrl.Log.WithName(r.name),
	})
	if err != nil {
		t.Fatal(err)
	}
	allow := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		r.admitted.Add(1)
		return admission.Allowed("")
	})
	// GetWebhookServer is what adds the server to the manager.
	mgr.GetWebhookServer().Register("/mutate", &admission.Webhook{Handler: allow})
	mgr.GetWebhookServer().Register("/validate", &admission.Webhook{Handler: allow})
	opts := e.opts
	opts.CertDir = r.certDir
	r.ready, err = certs.Setup(mgr, opts, clock.RealClock{})
	if err != nil {
		t.Fatalf("certs.Setup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", r.name, err)
		}
	})
}

// served is the certificate the replica's webhook server hands out now.
func (r *replica) served() (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(r.port),
		&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test inspects the certificate itself
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func (e *testEnv) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: e.system, Name: e.opts.SecretName}, s); err != nil {
		t.Fatalf("reading the certificate Secret: %v", err)
	}
	return s
}

// injectedBundles is every webhook's caBundle, by "kind/webhook".
func (e *testEnv) injectedBundles(t *testing.T) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.MutatingWebhookName}, m); err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Webhooks {
		out["mutating/"+w.Name] = w.ClientConfig.CABundle
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: e.opts.ValidatingWebhookName}, v); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		out["validating/"+w.Name] = w.ClientConfig.CABundle
	}
	return out
}

func (e *testEnv) allInjected(t *testing.T, bundle []byte) error {
	for k, b := range e.injectedBundles(t) {
		if string(b) != string(bundle) {
			return fmt.Errorf("%s has a caBundle of %d bytes, not the Secret's %d", k, len(b), len(bundle))
		}
	}
	return nil
}

func (e *testEnv) createConfigMap(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "load-", Namespace: e.workloads}}
	return env.Client.Create(ctx, cm)
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
