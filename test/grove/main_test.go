// Package grove tests shepherd's Grove reconcilers — gang termination
// (reconcile/gang, R-GT) and Training workloads (reconcile/training, R-TR) —
// against a real kube-apiserver. The test plays Grove's controllers and the
// kubelet: it creates PodCliqueSets, PodCliqueScalingGroups, PodCliques and
// Pods with Grove's labels and ownerReferences, flips Pod readiness, sets
// container exit codes, and recreates what shepherd deletes when a scenario
// needs it. There is no garbage collector, so the tests assert the deletions
// shepherd makes itself.
package grove

import (
	"fmt"
	"os"
	"testing"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	var err error
	env, err = cluster.New(cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping control plane:", err)
	}
	os.Exit(code)
}
