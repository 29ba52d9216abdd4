package integrations

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
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/api"
)

// WorkloadAPIProbe is serve's one answer to "does the cluster serve the
// Workload API, and in which version?": V-TR-7 and D-WL-1 ask it on every
// admission, the Workload reconciler on every reconcile. It answers from a
// discovery check repeated every Interval, so that neither admission nor a
// reconcile waits on discovery and a feature gate turned on (or off) is
// noticed without a restart.
type WorkloadAPIProbe struct {
	Discovery discovery.DiscoveryInterface
	Interval  time.Duration

	last    atomic.Pointer[WorkloadAPI]
	checked atomic.Bool
}

// WorkloadAPI is what discovery found.
type WorkloadAPI struct {
	// Served: some version serves Workloads (what V-TR-7 needs).
	Served bool
	// Version is the most preferred version serving both Workloads and
	// PodGroups (what shepherd writes in); "" when none does.
	Version string
}

// Served reports the last discovery result (false before the first check).
func (p *WorkloadAPIProbe) Served() bool {
	w := p.last.Load()
	return w != nil && w.Served
}

// Version is the version to write Workloads and PodGroups in; ok is false
// when none serves both (or before the first check).
func (p *WorkloadAPIProbe) Version() (version string, ok bool) {
	w := p.last.Load()
	if w == nil || w.Version == "" {
		return "", false
	}
	return w.Version, true
}

// Answer is Version for the Workload reconciler (integrations.ControllerOptions), an
// error until the first check has succeeded: a reconcile must not record
// that the API is missing on a guess.
func (p *WorkloadAPIProbe) Answer() (version string, ok bool, err error) {
	if !p.checked.Load() {
		return "", false, errors.New("Workload API discovery has not succeeded yet")
	}
	version, ok = p.Version()
	return version, ok, nil
}

// Check runs discovery once and records the result.
func (p *WorkloadAPIProbe) Check(ctx context.Context) error {
	w, err := DiscoverWorkloadAPI(p.Discovery)
	if err != nil {
		return err
	}
	if old := p.last.Swap(&w); old == nil || *old != w {
		ctrl.LoggerFrom(ctx).Info("Workload API discovery", "served", w.Served, "version", w.Version)
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

// DiscoverWorkloadAPI asks the apiserver which scheduling.k8s.io versions
// (api.SchedulingVersions, most preferred first) serve Workloads and
// PodGroups.
func DiscoverWorkloadAPI(dc discovery.DiscoveryInterface) (WorkloadAPI, error) {
	var w WorkloadAPI
	for _, v := range api.SchedulingVersions {
		list, err := dc.ServerResourcesForGroupVersion(api.SchedulingGroup + "/" + v)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return WorkloadAPI{}, fmt.Errorf("discovering %s/%s: %w", api.SchedulingGroup, v, err)
		}
		has := map[string]bool{}
		for _, r := range list.APIResources {
			has[r.Name] = true
		}
		w.Served = w.Served || has["workloads"]
		if has["workloads"] && has["podgroups"] {
			// The first version serving both, in preference order, is
			// the one written; the older ones need not be asked about.
			w.Version = v
			return w, nil
		}
	}
	return w, nil
}

// NewWorkloadAPIProbe returns a probe that checks discovery every interval.
func NewWorkloadAPIProbe(mgr manager.Manager, interval time.Duration) (*WorkloadAPIProbe, error) {
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client: %w", err)
	}
	return &WorkloadAPIProbe{Discovery: dc, Interval: interval}, nil
}
