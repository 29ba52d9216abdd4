// Package grove tests shepherd's Grove reconcilers — gang termination
// (integrations/grove/gang, R-GT) and Training workloads (integrations/grove/training, R-TR) —
// against a real kube-apiserver. The test plays Grove's controllers and the
// kubelet: it creates PodCliqueSets, PodCliqueScalingGroups, PodCliques and
// Pods with Grove's labels and ownerReferences, flips Pod readiness, sets
// container exit codes, and recreates what shepherd deletes when a scenario
// needs it. There is no garbage collector, so the tests assert the deletions
// shepherd makes itself.
//
// The control plane serves the upstream CRDs (docs/concepts.md, "Beside
// Trainer, JobSet and Grove"): Grove's schema as Grove publishes it, which
// has no workloadType, trainingSpec, wasAvailable, phase, restartCount or
// startTime, so the knobs are set in their shepherd.dev/ carriers and
// shepherd keeps the status in the set's WorkloadRecord. A second control
// plane serving the seed-shaped CRDs (test/seedcrds), started by the tests
// that need it, keeps the seed fields' form covered. Scenarios that play
// Grove's own operator write MinAvailableBreached as the field manager
// groveManager.
package grove

import (
	"fmt"
	"sync"
	"testing"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// platform is a control plane and the schemas it serves, which decide the
// form of every knob and status carrier.
type platform struct {
	name    string
	cl      *cluster.Cluster
	schemas knob.FieldSchemas
	// seed is true when the served CRDs are the seed shapes (fields), false
	// for Grove's published schema (carriers).
	seed bool
}

var (
	// env is the upstream control plane; the benchmarks use it directly.
	env      *cluster.Cluster
	upstream *platform

	seedOnce sync.Once
	seedP    *platform
	seedErr  error
)

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{CRDs: cluster.UpstreamCRDs}, &env, func(c *cluster.Cluster) (cluster.Teardown, error) {
		var err error
		upstream, err = platformOn("upstream", c, cluster.UpstreamCRDs)
		return cluster.Undo(stopSeedPlatform), err
	})
}

// newPlatform starts a control plane serving set.
func newPlatform(name string, set cluster.CRDSet) (*platform, error) {
	cl, err := cluster.New(cluster.Options{CRDs: set})
	if err != nil {
		return nil, err
	}
	return platformOn(name, cl, set)
}

// platformOn is the platform of cl, which serves set.
func platformOn(name string, cl *cluster.Cluster, set cluster.CRDSet) (*platform, error) {
	crds, err := cluster.FrameworkCRDs(set)
	if err != nil {
		return nil, err
	}
	schemas, err := celrules.NewSchemas(crds, name)
	if err != nil {
		return nil, fmt.Errorf("schemas of the %s CRDs: %w", name, err)
	}
	return &platform{name: name, cl: cl, schemas: schemas, seed: set == cluster.SeedCRDs}, nil
}

// stopSeedPlatform stops the seed control plane if a test started it.
func stopSeedPlatform() error {
	if seedP == nil {
		return nil
	}
	if err := seedP.cl.Stop(); err != nil {
		return fmt.Errorf("stopping the seed control plane: %w", err)
	}
	return nil
}

// seedPlatform starts, once, the control plane serving the seed CRDs.
func seedPlatform(t testing.TB) *platform {
	t.Helper()
	seedOnce.Do(func() { seedP, seedErr = newPlatform("seed", cluster.SeedCRDs) })
	if seedErr != nil {
		t.Fatal(seedErr)
	}
	return seedP
}

// onBoth runs a scenario on Grove's schema (carriers) and on the seed schema
// (fields).
func onBoth(t *testing.T, scenario func(t *testing.T, w *world)) {
	t.Run("upstream", func(t *testing.T) {
		t.Parallel()
		scenario(t, newWorldOn(t, upstream))
	})
	t.Run("seed", func(t *testing.T) {
		t.Parallel()
		scenario(t, newWorldOn(t, seedPlatform(t)))
	})
}
