package server

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

func fakeDiscovery(groupVersions ...string) *fakediscovery.FakeDiscovery {
	f := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	for _, gv := range groupVersions {
		f.Resources = append(f.Resources, &metav1.APIResourceList{
			GroupVersion: gv,
			APIResources: []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}},
		})
	}
	return f
}

func TestWorkloadAPIServed(t *testing.T) {
	for _, tc := range []struct {
		name string
		gvs  []string
		want bool
	}{
		{"v1beta1", []string{"scheduling.k8s.io/v1beta1"}, true},
		{"v1alpha3 only (1.37)", []string{"scheduling.k8s.io/v1alpha3"}, true},
		{"v1alpha2 only (1.36)", []string{"scheduling.k8s.io/v1alpha2"}, true},
		{"priority classes only", []string{"scheduling.k8s.io/v1"}, false},
		{"nothing", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WorkloadAPIServed(fakeDiscovery(tc.gvs...))
			if err != nil || got != tc.want {
				t.Errorf("WorkloadAPIServed = %v, %v; want %v", got, err, tc.want)
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
	if !p.Served() {
		t.Error("a failed check changed the answer")
	}
}

type failingDiscovery struct{ *fakediscovery.FakeDiscovery }

func (failingDiscovery) ServerResourcesForGroupVersion(string) (*metav1.APIResourceList, error) {
	return nil, errors.New("apiserver unavailable")
}
