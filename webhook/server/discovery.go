package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/api"
)

// WorkloadAPIProbe answers V-TR-7's question — does the cluster serve the
// Workload API? — from a discovery check repeated every Interval, so that
// admission never waits on discovery and a feature gate turned on (or off)
// is noticed without a restart.
type WorkloadAPIProbe struct {
	Discovery discovery.DiscoveryInterface
	Interval  time.Duration

	served  atomic.Bool
	checked atomic.Bool
}

// Served reports the last discovery result (false before the first check).
func (p *WorkloadAPIProbe) Served() bool { return p.served.Load() }

// Check runs discovery once and records the result.
func (p *WorkloadAPIProbe) Check(ctx context.Context) error {
	served, err := WorkloadAPIServed(p.Discovery)
	if err != nil {
		return err
	}
	if old := p.served.Swap(served); old != served || !p.checked.Load() {
		ctrl.LoggerFrom(ctx).Info("Workload API discovery", "served", served)
	}
	p.checked.Store(true)
	return nil
}

// Start checks at once, then every Interval until ctx ends. A failed check
// keeps the previous answer and is retried at the next tick.
func (p *WorkloadAPIProbe) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("workload-api-probe")
	ctx = ctrl.LoggerInto(ctx, log)
	interval := p.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := p.Check(ctx); err != nil {
			log.Error(err, "Workload API discovery failed; keeping the previous answer", "served", p.Served())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica answers admission.
func (p *WorkloadAPIProbe) NeedLeaderElection() bool { return false }

// ReadyChecker fails until the first discovery check has succeeded, so a
// replica never answers V-TR-7 from a guess.
func (p *WorkloadAPIProbe) ReadyChecker(_ *http.Request) error {
	if !p.checked.Load() {
		return errors.New("Workload API discovery has not succeeded yet")
	}
	return nil
}

// WorkloadAPIServed reports whether the apiserver serves workloads in any
// scheduling.k8s.io version shepherd supports.
func WorkloadAPIServed(dc discovery.DiscoveryInterface) (bool, error) {
	for _, v := range api.SchedulingVersions { // any of them satisfies V-TR-7 (docs/rules.md#v-tr-7)
		list, err := dc.ServerResourcesForGroupVersion(api.SchedulingGroup + "/" + v)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("discovering %s/%s: %w", api.SchedulingGroup, v, err)
		}
		for _, r := range list.APIResources {
			if r.Name == "workloads" {
				return true, nil
			}
		}
	}
	return false, nil
}
