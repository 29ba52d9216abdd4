package foundation

import (
	"testing"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// TestWorkloadAPIServedOnlyWhenEnabled starts one control plane per setting:
// the Workload API is served at exactly the version asked for, and not at all
// without the feature gate — the case rule V-TR-7 must detect.
func TestWorkloadAPIServedOnlyWhenEnabled(t *testing.T) {
	versions := []cluster.WorkloadAPI{cluster.WorkloadAPIV1beta1, cluster.WorkloadAPIV1alpha3}
	for _, setting := range []cluster.WorkloadAPI{cluster.WorkloadAPIOff, cluster.WorkloadAPIV1beta1, cluster.WorkloadAPIV1alpha3} {
		name := string(setting)
		if setting == cluster.WorkloadAPIOff {
			name = "off"
		}
		t.Run(name, func(t *testing.T) {
			c := cluster.Start(t, cluster.Options{WorkloadAPI: setting})
			for _, v := range versions {
				for _, resource := range []string{"workloads", "podgroups"} {
					served, err := c.Serves("scheduling.k8s.io/"+string(v), resource)
					if err != nil {
						t.Fatal(err)
					}
					if want := v == setting; served != want {
						t.Errorf("scheduling.k8s.io/%s %s served = %v, want %v", v, resource, served, want)
					}
				}
			}
		})
	}
}
