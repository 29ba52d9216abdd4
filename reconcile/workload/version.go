package workload

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"

	"github.com/shepherd-k8s/shepherd/api"
)

// Versions are the scheduling.k8s.io versions shepherd can write Workloads
// and PodGroups in, most preferred first.
var Versions = api.SchedulingVersions

// ChooseVersion picks the most preferred of Versions that serves both
// Workloads and PodGroups; ok is false when none does.
func ChooseVersion(serves func(version string) bool) (version string, ok bool) {
	for _, v := range Versions {
		if serves(v) {
			return v, true
		}
	}
	return "", false
}

// discoverVersion asks the apiserver which version to use. Discovery is read
// at every reconcile that needs it rather than cached, so a cluster that
// enables or upgrades the Workload API is followed without a restart.
func discoverVersion(dc discovery.DiscoveryInterface) (version string, ok bool, err error) {
	served := map[string]bool{}
	for _, v := range Versions {
		list, err := dc.ServerResourcesForGroupVersion(api.SchedulingGroup + "/" + v)
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", false, fmt.Errorf("discovering %s/%s: %w", api.SchedulingGroup, v, err)
		}
		has := map[string]bool{}
		for _, r := range list.APIResources {
			has[r.Name] = true
		}
		served[v] = has["workloads"] && has["podgroups"]
		if served[v] {
			// The first served version in preference order wins; no need to
			// ask about the older ones.
			break
		}
	}
	version, ok = ChooseVersion(func(v string) bool { return served[v] })
	return version, ok, nil
}
