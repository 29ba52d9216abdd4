package integrations

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// Answer, the Workload reconciler's question, is an error until a check
// has succeeded, then the version to write in.
func TestProbeAnswer(t *testing.T) {
	p := &WorkloadAPIProbe{Discovery: fakeDiscovery("scheduling.k8s.io/v1beta1:workloads-only")}
	if _, _, err := p.Answer(); err == nil || !strings.Contains(err.Error(), "has not succeeded yet") {
		t.Errorf("Answer before a check: %v", err)
	}
	if err := p.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Workloads without PodGroups: served, nothing to write in.
	if v, ok, err := p.Answer(); err != nil || ok || v != "" || !p.Served() {
		t.Errorf("Answer = %q, %v, %v (served %v); want no version, served", v, ok, err, p.Served())
	}
	p.Discovery = fakeDiscovery("scheduling.k8s.io/v1alpha3")
	if err := p.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := p.Answer(); err != nil || !ok || v != "v1alpha3" {
		t.Errorf("Answer = %q, %v, %v; want v1alpha3", v, ok, err)
	}
	if p.NeedLeaderElection() {
		t.Error("the probe needs leader election; every replica answers admission")
	}
}

// A discovery failure other than NotFound is an error naming the version.
func TestDiscoverWorkloadAPIError(t *testing.T) {
	_, err := DiscoverWorkloadAPI(failingDiscovery{fakeDiscovery()})
	if err == nil || !strings.HasPrefix(err.Error(), "discovering scheduling.k8s.io/v1beta1: apiserver unavailable") {
		t.Errorf("DiscoverWorkloadAPI = %v", err)
	}
}

// swapDiscovery answers from whichever fake discovery cur holds, so a test
// can change what the apiserver serves while a probe runs.
type swapDiscovery struct {
	*fakediscovery.FakeDiscovery
	cur *atomic.Pointer[fakediscovery.FakeDiscovery]
}

func (s swapDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	return s.cur.Load().ServerResourcesForGroupVersion(gv)
}

// Start checks at once and then every Interval, so a feature gate turned
// on is noticed without a restart, keeps running while discovery fails,
// and returns when its context ends.
func TestProbeStartChecksEveryInterval(t *testing.T) {
	p := &WorkloadAPIProbe{Discovery: failingDiscovery{fakeDiscovery()}, Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Start returned %v while discovery failed; want it to keep trying", err)
	default:
	}
	if p.ReadyChecker(nil) == nil {
		t.Error("ready although every check failed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start = %v, want nil", err)
	}

	var cur atomic.Pointer[fakediscovery.FakeDiscovery]
	cur.Store(fakeDiscovery())
	p = &WorkloadAPIProbe{Discovery: swapDiscovery{fakeDiscovery(), &cur}, Interval: 20 * time.Millisecond}
	ctx, cancel = context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	defer cancel()
	go func() { done <- p.Start(ctx) }()
	testkit.Eventually(t, 5*time.Second, "the first check", func() error { return p.ReadyChecker(nil) })
	if p.Served() {
		t.Fatal("served before discovery shows the API")
	}
	cur.Store(fakeDiscovery("scheduling.k8s.io/v1beta1"))
	testkit.Eventually(t, 5*time.Second, "the API noticed", p.Served)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start = %v, want nil", err)
	}
}
