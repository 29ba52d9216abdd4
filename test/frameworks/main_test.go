// Package frameworks tests that frameworks come and go (docs/operations.md,
// "Frameworks") end to end: `shepherd serve`, running in this process with
// its production flags and
// shepherd's webhook configurations registered, starts against a real
// kube-apiserver that serves none of Trainer's, JobSet's or Grove's CRDs,
// becomes ready without them, and picks each framework up — admission
// lookups and reconcilers — once the test installs its upstream CRDs,
// without a restart.
//
// The tests run one serve at a time (never in parallel): the metrics are
// per process, and every serve uses the one webhook port the apiserver
// calls. Controller names are unique per process too, so only one serve
// runs in this process; another runs as a child process of the test binary
// (see serveChild).
package frameworks

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// timeout bounds every wait: generous, the machine is small and shared.
const timeout = 60 * time.Second

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		CRDs: cluster.NoFrameworkCRDs,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env)
}

func startServe(t *testing.T, args ...string) *cluster.Serving {
	t.Helper()
	s, err := env.Serve(append(suiteFlags, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("shepherd serve: %v", err)
		}
		if t.Failed() {
			t.Logf("shepherd serve output:\n%s", s.Log())
		}
	})
	return s
}

// suiteFlags are the suite's `shepherd serve` flags on top of the
// harness's.
var suiteFlags = []string{
	"--metrics-bind-address=0", // the gauges are read from this process's registry
	"--leader-elect=false",
	"--graceful-shutdown-timeout=10s",
}

// serveChild runs `shepherd serve` with the suite's flags plus args in a
// child process (this test binary in cluster.ServeRole) until it exits or
// timeout passes, and returns its output and error.
func serveChild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv, err := env.ServeArgs(t.TempDir(), cluster.FreeAddr(), cluster.FreeAddr(), append(suiteFlags, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	cmd := cluster.ChildCommand(ctx, cluster.ServeRole, argv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
