// Package observability proves deploy/observability — the Grafana dashboard
// and the PrometheusRule alerts — against the real thing: one `shepherd
// serve` on the test control plane admits a JobSet and denies another, holds
// a WorkloadPolicy that compiles and one that does not, and leads; then
// every metric a panel or an alert names is looked up in what that serve and
// the apiserver export on /metrics. Expressions are parsed with Prometheus'
// own PromQL parser; every alert carries severity, summary, description and
// runbook; the Kustomization builds. It also reads WorkloadPolicies as
// `kubectl get` does (the apiserver's Table) to check their printer columns.
package observability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

var (
	env   *cluster.Cluster
	serve *cluster.Serving
)

// The two WorkloadPolicies the suite holds: one that denies JobSets labelled
// team=none, one that names a field JobSet does not have.
const (
	denyPolicy   = "known-teams"
	brokenPolicy = "does-not-compile"
)

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env, setup)
}

// setup starts serve as deployed, with the suite's policies in force.
func setup(c *cluster.Cluster) (cluster.Teardown, error) {
	// The certificate directory as cert-manager mounts it: the pair and the
	// CA that issued it (envtest's), so the CA expiry series exist.
	wh := c.Env.WebhookInstallOptions
	if err := os.WriteFile(filepath.Join(wh.LocalServingCertDir, "ca.crt"), wh.LocalServingCAData, 0o600); err != nil {
		return nil, err
	}
	// Plain-HTTP metrics so the suite scrapes without a token (test/webhook
	// covers the authenticated server); leader election on, as deployed.
	var err error
	if serve, err = c.Serve("--metrics-secure=false"); err != nil {
		return nil, err
	}
	// After serve is up: it validates WorkloadPolicies at apply.
	if err := createPolicies(); err != nil {
		return serve.Teardown, err
	}
	if err := waitPolicyStatus(); err != nil {
		return serve.Teardown, err
	}
	return serve.Teardown, nil
}

func createPolicies() error {
	match := shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{
		APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Operations: []string{"CREATE"},
	}}}
	for _, p := range []*shepherdv1alpha1.WorkloadPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: denyPolicy},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{Action: shepherdv1alpha1.ActionDeny, Match: match, Validations: []shepherdv1alpha1.Validation{{
			Expression: `!has(object.metadata.labels) || !('team' in object.metadata.labels) || object.metadata.labels['team'] != 'none'`,
			Message:    "team none is not a team",
		}}},
	}, {
		// Stored unchecked, as a policy applied ahead of its kind's CRD:
		// admission would refuse it.
		ObjectMeta: metav1.ObjectMeta{Name: brokenPolicy, Labels: map[string]string{api.LabelApplyUnchecked: "true"}},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{Action: shepherdv1alpha1.ActionAudit, Match: match, Validations: []shepherdv1alpha1.Validation{{
			Expression: "object.spec.replicatedJobs.size() >", // a syntax error
		}}},
	}} {
		if err := env.Client.Create(context.Background(), p); err != nil {
			return fmt.Errorf("creating WorkloadPolicy %s: %w", p.Name, err)
		}
	}
	return nil
}

// waitPolicyStatus waits until serve has written both policies' Ready
// condition: known-teams True, does-not-compile False.
func waitPolicyStatus() error {
	want := map[string]metav1.ConditionStatus{denyPolicy: metav1.ConditionTrue, brokenPolicy: metav1.ConditionFalse}
	err := testkit.Poll(200*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		for name, status := range want {
			p := &shepherdv1alpha1.WorkloadPolicy{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
				return false, testkit.Stop(err)
			}
			got := metav1.ConditionUnknown
			if c := meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady); c != nil {
				got = c.Status
			}
			if got != status {
				return false, fmt.Errorf("WorkloadPolicy %s Ready=%s, want %s", name, got, status)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("policy status not written: %w", err)
	}
	return nil
}
