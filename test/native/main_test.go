// Package native tests the native admission mode end to end: a real
// kube-apiserver with the upstream CRDs, deploy/native's
// ValidatingAdmissionPolicies and MutatingAdmissionPolicies applied, its
// narrowed webhook configurations registered, its audit policy and an audit
// webhook backend posting to `shepherd serve --admission-mode=native`'s
// audit sink.
package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

// sinkToken is the audit sink's bearer token, in the apiserver's audit
// webhook kubeconfig and serve's --audit-sink-token-file.
const sinkToken = "native-test-sink-token"

var (
	env   *cluster.Cluster
	serve *cluster.Serving
	// sinkURL is serve's audit sink, as the apiserver posts to it.
	sinkURL string
	// native are deploy/native's objects, as Kustomize builds them.
	native []*unstructured.Unstructured
)

func TestMain(m *testing.M) {
	opts, tokenFile, err := options()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cluster.RunMain(m, opts, &env, func(*cluster.Cluster) (cluster.Teardown, error) {
		return nil, applyPolicies(context.Background())
	}, func(c *cluster.Cluster) (cluster.Teardown, error) {
		var err error
		if serve, err = c.Serve("--admission-mode=native", "--audit-sink-token-file="+tokenFile,
			"--leader-elect=false", "--disable-reconcilers", "--metrics-secure=false",
			"--workload-api-discovery-interval=2s"); err != nil {
			return nil, err
		}
		return serve.Teardown, nil
	})
}

// options is the suite's control plane: deploy/native's narrowed webhook
// configurations registered, its audit policy, and an audit webhook
// backend posting to serve's sink (sinkURL) with the bearer token in
// tokenFile.
func options() (_ cluster.Options, tokenFile string, err error) {
	if native, err = install.Build(install.Dir("native")); err != nil {
		return cluster.Options{}, "", err
	}
	var muts []*admissionregistrationv1.MutatingWebhookConfiguration
	var vals []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, o := range native {
		switch o.GetKind() {
		case "MutatingWebhookConfiguration":
			w := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, w); err != nil {
				return cluster.Options{}, "", err
			}
			muts = append(muts, w)
		case "ValidatingWebhookConfiguration":
			w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, w); err != nil {
				return cluster.Options{}, "", err
			}
			vals = append(vals, w)
		}
	}
	if len(muts) != 1 || len(vals) != 1 {
		return cluster.Options{}, "", fmt.Errorf("deploy/native builds %d mutating and %d validating webhook configurations, want one each", len(muts), len(vals))
	}

	dir, err := os.MkdirTemp("", "shepherd-native-test-")
	if err != nil {
		return cluster.Options{}, "", err
	}
	// The apiserver's audit webhook backend is configured at its start,
	// before envtest issues the webhook server's certificate (it does
	// after the apiserver is up), so this kubeconfig cannot name that CA:
	// it skips the server check. What the test checks is the delivery and
	// the sink's own authentication (the bearer token), not TLS.
	port := cluster.FreePort()
	sinkURL = fmt.Sprintf("https://127.0.0.1:%d/audit-sink", port)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: sink
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: kube-apiserver
  user:
    token: %s
contexts:
- name: sink
  context: {cluster: sink, user: kube-apiserver}
current-context: sink
`, sinkURL, sinkToken)
	auditKubeconfig := filepath.Join(dir, "audit-webhook.kubeconfig")
	tokenFile = filepath.Join(dir, "sink-token")
	if err := os.WriteFile(auditKubeconfig, []byte(kubeconfig), 0o600); err != nil {
		return cluster.Options{}, "", err
	}
	if err := os.WriteFile(tokenFile, []byte(sinkToken+"\n"), 0o600); err != nil {
		return cluster.Options{}, "", err
	}

	return cluster.Options{
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		Webhooks: envtest.WebhookInstallOptions{
			MutatingWebhooks:   muts,
			ValidatingWebhooks: vals,
			LocalServingHost:   "127.0.0.1",
			LocalServingPort:   port,
		},
		ExtraAPIServerFlags: map[string]string{
			"audit-policy-file":         filepath.Join(install.Dir("native"), "apiserver", "audit-policy.yaml"),
			"audit-webhook-config-file": auditKubeconfig,
			// Batches, as in production, but sent at once: a verdict
			// reaches the sink within a fraction of a second.
			"audit-webhook-mode":           "batch",
			"audit-webhook-batch-max-wait": "200ms",
			// serve stops before the apiserver: a batch still queued is
			// retried from 200ms, not 10s, so the apiserver stops promptly.
			"audit-webhook-initial-backoff": "200ms",
		},
	}, tokenFile, nil
}

// applyPolicies applies deploy/native's admission policies and bindings.
func applyPolicies(ctx context.Context) error {
	n := 0
	for _, o := range native {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
			if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("native-test")); err != nil {
				return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
			}
			n++
		}
	}
	if n < 40 {
		return fmt.Errorf("deploy/native holds only %d admission policies and bindings", n)
	}
	return nil
}
