// Package events sends shepherd's Kubernetes Events (GangTerminated,
// DeadlineExceeded, PolicyViolation, ...) through a client of their own with
// its own rate limit, as the kubelet does with --event-qps: Events are
// best-effort notes, and when a thousand gangs expire in the same second the
// apiserver's capacity belongs to the deletes and status patches that
// enforce them, not to the Events describing them. Events over the limit
// wait in the broadcaster's queue and go out at the limit's pace.
package events

import (
	"context"
	"fmt"
	"os"

	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	clientevents "k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// Defaults for Options.
const (
	DefaultQPS   = 50
	DefaultBurst = 25
)

// Options is the Events' rate limit.
type Options struct {
	// QPS is the sustained rate of Events written; Burst how many may go
	// at once above it.
	QPS   float32
	Burst int
}

// Manager returns mgr with GetEventRecorder answering from a broadcaster
// whose client is limited by opts. Everything else is mgr's.
func Manager(mgr ctrl.Manager, opts Options) (ctrl.Manager, error) {
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	cl, err := eventsv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Events client: %w", err)
	}
	b := clientevents.NewBroadcaster(&clientevents.EventSinkImpl{Interface: cl})
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("starting the Events broadcaster: %w", err)
		}
		<-ctx.Done()
		b.Shutdown()
		return nil
	})); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &limited{Manager: mgr, broadcaster: b, client: cl, instance: host}, nil
}

// everyReplica is a runnable that does not need leader election: the
// broadcaster runs on every replica, because every replica answers
// admission and its webhook's PolicyViolation Events must go out. A plain
// manager.RunnableFunc would wait for leadership, so a standby's Events
// would queue and be dropped. Reconciler Events still come only from the
// leader: its reconcilers are the only ones that run.
type everyReplica manager.RunnableFunc

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (everyReplica) NeedLeaderElection() bool { return false }

type limited struct {
	ctrl.Manager
	broadcaster clientevents.EventBroadcaster
	client      eventsv1client.EventsV1Interface
	instance    string
}

func (m *limited) GetEventRecorder(name string) recorder.EventRecorder {
	// client-go's recorder implements both halves of controller-runtime's
	// interface (the test exercises this assertion).
	return m.broadcaster.NewRecorder(m.GetScheme(), name).(recorder.EventRecorder)
}

// GetLifecycleRecorder returns the recorder of Events that must survive a
// crash, on the Events' own rate-limited client.
func (m *limited) GetLifecycleRecorder(name string) *Lifecycle {
	return NewLifecycle(m.client, m.GetScheme(), name, m.instance, nil)
}
