package integrations

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

func fakeDiscovery(groupVersions ...string) *fakediscovery.FakeDiscovery {
	f := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	for _, gv := range groupVersions {
		resources := []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}}
		if name, ok := strings.CutSuffix(gv, ":workloads-only"); ok {
			gv, resources = name, resources[:1]
		}
		f.Resources = append(f.Resources, &metav1.APIResourceList{GroupVersion: gv, APIResources: resources})
	}
	return f
}

func TestDiscoverWorkloadAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		gvs  []string
		want WorkloadAPI
	}{
		{"v1beta1", []string{"scheduling.k8s.io/v1beta1"}, WorkloadAPI{Served: true, Version: "v1beta1"}},
		{"v1alpha3 only (1.37)", []string{"scheduling.k8s.io/v1alpha3"}, WorkloadAPI{Served: true, Version: "v1alpha3"}},
		{"v1alpha2 only (1.36)", []string{"scheduling.k8s.io/v1alpha2"}, WorkloadAPI{Served: true, Version: "v1alpha2"}},
		{"the most preferred of two", []string{"scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1beta1"}, WorkloadAPI{Served: true, Version: "v1beta1"}},
		{"Workloads without PodGroups: V-TR-7 holds, nothing to write in", []string{"scheduling.k8s.io/v1beta1:workloads-only"}, WorkloadAPI{Served: true}},
		{"an older version serving both", []string{"scheduling.k8s.io/v1beta1:workloads-only", "scheduling.k8s.io/v1alpha3"}, WorkloadAPI{Served: true, Version: "v1alpha3"}},
		{"priority classes only", []string{"scheduling.k8s.io/v1"}, WorkloadAPI{}},
		{"nothing", nil, WorkloadAPI{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DiscoverWorkloadAPI(fakeDiscovery(tc.gvs...))
			if err != nil || got != tc.want {
				t.Errorf("DiscoverWorkloadAPI = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestProbeKeepsItsAnswerWhenDiscoveryFails(t *testing.T) {
	d := fakeDiscovery("scheduling.k8s.io/v1beta1")
	p := &WorkloadAPIProbe{Discovery: d}
	if err := p.ReadyChecker(nil); err == nil {
		t.Error("ready before the first check")
	}
	if _, ok := p.Version(); ok || p.Served() {
		t.Error("an answer before the first check")
	}
	if err := p.Check(context.Background()); err != nil || !p.Served() {
		t.Fatalf("first check: %v, served %v", err, p.Served())
	}
	if err := p.ReadyChecker(nil); err != nil {
		t.Errorf("not ready after a check: %v", err)
	}
	p.Discovery = failingDiscovery{d}
	if err := p.Check(context.Background()); err == nil {
		t.Fatal("a failing discovery reported no error")
	}
	if v, ok := p.Version(); !p.Served() || !ok || v != "v1beta1" {
		t.Errorf("a failed check changed the answer: served %v, version %q %v", p.Served(), v, ok)
	}
}

type failingDiscovery struct{ *fakediscovery.FakeDiscovery }

func (failingDiscovery) ServerResourcesForGroupVersion(string) (*metav1.APIResourceList, error) {
	return nil, errors.New("apiserver unavailable")
}
