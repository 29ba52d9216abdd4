package leader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	crleaderelection "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/api"
)

// Elector campaigns for the Lease and runs a term while this replica holds
// it, again and again until its context ends: losing the Lease (an
// apiserver outage longer than the renew deadline, say) stops the
// reconcilers and nothing else, and the replica campaigns again.
type Elector struct {
	terms *Terms
	lock  resourcelock.Interface
	// leases and leaseName read and delete the Lease directly
	// (takeExpired); leases is nil when the lock is not a Lease.
	leases    leaseClient
	leaseName string
	// cannotDelete is set once the apiserver refused a delete (RBAC).
	cannotDelete atomic.Bool

	leaseDuration, renewDeadline, retryPeriod time.Duration
	log                                       logr.Logger
}

// leaseClient is the part of the Leases client takeExpired uses.
type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Permissions of leader election (for RBAC generation; test/rbac checks
// the shipped RBAC grants them): one Lease, --leader-election-id; create
// cannot be limited by name; delete takes an expired Lease (takeExpired).
// Its Events go through the core API.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=shepherd-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update;patch;delete,namespace=shepherd-system,resourceNames=shepherd.shepherd.dev
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch

// LeaseNamespace is the leader-election Lease's namespace:
// --leader-election-namespace if set, else shepherd's own as the
// certificate code defaults it (api.OwnNamespace: $POD_NAMESPACE, else the
// service account's, else shepherd-system). controller-runtime's own
// default reads only the service account's file, so out of a pod it
// ignored $POD_NAMESPACE and failed.
func LeaseNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	return api.OwnNamespace()
}

// ElectionOptions are the Lease and its timings (serve's
// --leader-election-* flags).
type ElectionOptions struct {
	// ID is the Lease's name; Namespace its namespace (LeaseNamespace).
	ID, Namespace string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leader-election timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// NewElector builds the Lease lock as controller-runtime's manager would
// (the same identity scheme and client timeout), in LeaseNamespace(o.Namespace).
func NewElector(cfg *rest.Config, events recorder.Provider, terms *Terms, o ElectionOptions) (*Elector, error) {
	lock, err := crleaderelection.NewResourceLock(cfg, events, crleaderelection.Options{
		LeaderElection:          true,
		LeaderElectionID:        o.ID,
		LeaderElectionNamespace: LeaseNamespace(o.Namespace),
		RenewDeadline:           o.RenewDeadline,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election (--leader-election-namespace, --leader-election-id): %w", err)
	}
	e := &Elector{
		terms: terms, lock: lock, log: terms.log,
		leaseDuration: o.LeaseDuration, renewDeadline: o.RenewDeadline, retryPeriod: o.RetryPeriod,
	}
	if ll, ok := lock.(*resourcelock.LeaseLock); ok {
		e.leases, e.leaseName = ll.Client.Leases(ll.LeaseMeta.Namespace), ll.LeaseMeta.Name
	}
	return e, nil
}

// Run campaigns until ctx ends; it returns once the last term has stopped
// and the Lease, if held, has been released.
func (e *Elector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		e.campaign(ctx)
	}
}

// campaign waits for the Lease, runs a term while holding it, and returns
// when the term ends: the Lease lost, ctx ended, or the term failed.
func (e *Elector) campaign(ctx context.Context) {
	// The elector renews until told to stop, and it is told only once the
	// term has stopped: this replica's reconcilers never run without the
	// Lease renewed, and the Lease is never released while they run.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	takeCtx, stopTaking := context.WithCancel(ctx)
	defer stopTaking()
	// leading is set when a term starts; abandoned when the campaign ended
	// first (the callback may still be about to run: it then does nothing).
	var mu sync.Mutex
	var leading, abandoned bool
	termDone := make(chan struct{})
	var termErr error

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          e.lock,
		LeaseDuration: e.leaseDuration,
		RenewDeadline: e.renewDeadline,
		RetryPeriod:   e.retryPeriod,
		Name:          e.lock.Describe(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				mu.Lock()
				if abandoned {
					mu.Unlock()
					return
				}
				leading = true
				mu.Unlock()
				defer close(termDone)
				stopTaking()
				termCtx, cancel := context.WithCancel(leCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel) // shutdown ends the term
				defer stop()
				e.log.Info("leading: starting the reconcilers", "lease", e.lock.Describe(), "identity", e.lock.Identity())
				termErr = e.terms.Run(termCtx)
				stopElecting()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil { // the timings are checked at start; not expected
		e.log.Error(err, "configuring leader election")
		sleepCtx(ctx, e.leaseDuration)
		return
	}
	// Not leading yet: shutdown ends the campaign at once. (Leading: the
	// term ends first, then the campaign, above.)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			stopElecting()
		}
	})
	defer stop()
	if e.leases != nil {
		e.takeExpired(takeCtx)
		go wait.UntilWithContext(takeCtx, e.takeExpired, e.retryPeriod)
	}
	le.Run(electCtx)
	mu.Lock()
	abandoned = !leading
	mu.Unlock()
	if abandoned {
		if ctx.Err() != nil {
			e.release(ctx) // in case the Lease was acquired as the campaign ended
		}
		return
	}
	<-termDone
	switch {
	case ctx.Err() != nil:
		e.log.Info("shutting down: reconcilers stopped; releasing the Lease")
		e.release(ctx)
	case termErr != nil:
		// Let another replica lead while this one backs off.
		e.log.Error(termErr, "the reconcilers failed; releasing the Lease and campaigning again after a lease duration")
		e.release(ctx)
		sleepCtx(ctx, e.leaseDuration)
	default:
		e.log.Info("lost the Lease: reconcilers stopped; campaigning again", "lease", e.lock.Describe())
	}
}

// release gives the Lease up if this replica still holds it, as client-go's
// ReleaseOnCancel does, but only after the term's reconcilers have
// stopped. The update carries the resourceVersion just read: it fails,
// harmlessly, if another replica took the Lease meanwhile.
func (e *Elector) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.renewDeadline)
	defer cancel()
	rec, _, err := e.lock.Get(rctx)
	if err != nil || rec.HolderIdentity != e.lock.Identity() {
		return
	}
	now := metav1.NewTime(time.Now())
	if err := e.lock.Update(rctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	}); err != nil {
		e.log.Info("could not release the Lease; it expires on its own", "error", err.Error())
	}
}

// takeExpired deletes the Lease when its holder's last renewal is more
// than its duration ago, so that the elector, finding no Lease, creates it
// at once. client-go's elector instead waits a full lease duration from
// the moment it first sees a Lease, whatever its renewTime: a replica
// (re)started after its predecessor died, or every replica after an
// apiserver outage, would wait that long with nobody enforcing.
//
// It is safe because the delete carries the resourceVersion (and UID) that
// was judged expired: if the holder renewed in between, the apiserver
// refuses it, and no live leader loses its Lease. A holder that has not
// renewed for a lease duration stopped leading a while ago — it gives up
// after the renew deadline, shorter than the duration. The one assumption
// is that the replicas' clocks agree to within a lease duration minus a
// retry period (13 s by default), as they do on NTP-synchronised nodes: the
// renewTime compared is the holder's clock, the now is this replica's.
func (e *Elector) takeExpired(ctx context.Context) {
	if e.cannotDelete.Load() {
		return
	}
	taken, err := deleteExpiredLease(ctx, e.leases, e.leaseName, e.lock.Identity(), time.Now())
	switch {
	case apierrors.IsForbidden(err):
		// The Role lacks delete on the Lease: wait for expiry as
		// client-go's elector does.
		e.log.Info("cannot delete an expired Lease (RBAC: grant delete on it); waiting for it to expire instead", "lease", e.leaseName, "error", err.Error())
		e.cannotDelete.Store(true)
	case err != nil:
		e.log.V(1).Info("checking the Lease for expiry", "error", err.Error())
	case taken != "":
		e.log.Info("deleted the Lease its holder stopped renewing; taking it", "lease", e.leaseName, "previousHolder", taken)
	}
}

// deleteExpiredLease deletes Lease name if it is held, by someone other
// than identity, and its renewTime plus leaseDurationSeconds is before
// now; it returns the previous holder when it did. A Lease released
// (no holder) or held by identity needs no delete: the elector takes it
// at once.
func deleteExpiredLease(ctx context.Context, leases leaseClient, name, identity string, now time.Time) (string, error) {
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !leaseExpired(l, identity, now) {
		return "", nil
	}
	rv, uid := l.ResourceVersion, l.UID
	err = leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv, UID: &uid}})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return "", nil // renewed, taken or deleted meanwhile
	}
	if err != nil {
		return "", err
	}
	return *l.Spec.HolderIdentity, nil
}

// leaseExpired: held by someone other than identity, and not renewed for
// longer than its duration.
func leaseExpired(l *coordinationv1.Lease, identity string, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || *s.HolderIdentity == identity ||
		s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
