// Package interop runs shepherd the way a platform admin's cluster has it:
// beside the upstream operators' own CRDs (Trainer v2.3.0 and JobSet
// v0.12.0 from their Go modules, the Grove mirror), never instead of them.
// It installs every deploy/ variant and checks that no upstream CRD changed;
// it serves admission with shepherd's webhooks registered and applies every
// example under kubectl's default field validation (Strict) and under Warn
// (what controllers and SDKs send); it checks WorkloadPolicies and the
// exported ValidatingAdmissionPolicies against the schemas the cluster
// serves.
package interop

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var (
	env   *cluster.Cluster
	serve *cluster.Serving
	// upstream are the upstream CRDs as installed, before shepherd ran.
	upstream = map[string]*apiextensionsv1.CustomResourceDefinition{}
)

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env, setup)
}

// setup reads the upstream CRDs as served and starts serve.
func setup(c *cluster.Cluster) (cluster.Teardown, error) {
	crds, err := cluster.FrameworkCRDs(cluster.UpstreamCRDs)
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(crd), live); err != nil {
			return nil, fmt.Errorf("reading upstream CRD: %w", err)
		}
		upstream[live.Name] = live
	}
	// Plain-HTTP metrics so the suite can read /status without a token;
	// test/webhook covers the authenticated metrics server.
	if serve, err = c.Serve("--leader-elect=false", "--disable-reconcilers", "--metrics-secure=false"); err != nil {
		return nil, err
	}
	return serve.Teardown, nil
}
