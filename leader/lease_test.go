package leader

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

const (
	leaseNS   = "shepherd-system"
	leaseName = "shepherd.shepherd.dev"
)

var leaseGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// heldLease is the Lease as holder left it, renewed renewedAgo before now.
func heldLease(holder string, renewedAgo time.Duration, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: leaseName, ResourceVersion: "7", UID: types.UID("lease-uid")},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			RenewTime:            &metav1.MicroTime{Time: time.Now().Add(-renewedAgo)},
			AcquireTime:          &metav1.MicroTime{Time: time.Now().Add(-time.Hour)},
			LeaseDurationSeconds: ptr.To(seconds),
			LeaseTransitions:     ptr.To[int32](3),
		},
	}
}

// leaseOf is the stored Lease, nil when there is none; read from the
// store, past the reactors a test makes fail.
func leaseOf(t *testing.T, cs *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	o, err := cs.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), leaseNS, leaseName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.(*coordinationv1.Lease)
}

// leaseLock is client-go's Lease lock over cs, held as identity.
func leaseLock(cs *fake.Clientset, identity string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: leaseNS, Name: leaseName},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
}

// failing makes every verb on Leases of cs fail with err.
func failing(cs *fake.Clientset, verb string, err error) {
	cs.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

// TestDeleteExpiredLease: an expired Lease held by another is deleted
// under the resourceVersion and UID judged expired, and its holder
// returned; nothing is deleted when there is no Lease or it is fresh; a
// delete that lost a race (renewed: conflict, or gone) is no error; any
// other failure is.
func TestDeleteExpiredLease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		lease      *coordinationv1.Lease
		react      func(*fake.Clientset)
		wantHolder string
		wantErr    bool
		wantLease  bool // still stored afterwards
	}{
		{name: "no Lease"},
		{name: "renewed within its duration", lease: heldLease("other", 5*time.Second, 15), wantLease: true},
		{name: "expired", lease: heldLease("other", time.Minute, 15), wantHolder: "other"},
		{name: "expired, renewed before the delete", lease: heldLease("other", time.Minute, 15), wantLease: true,
			react: func(cs *fake.Clientset) {
				failing(cs, "delete", apierrors.NewConflict(leaseGR, leaseName, errors.New("precondition")))
			}},
		{name: "expired, deleted by another replica first", lease: heldLease("other", time.Minute, 15), wantLease: true,
			react: func(cs *fake.Clientset) { failing(cs, "delete", apierrors.NewNotFound(leaseGR, leaseName)) }},
		{name: "delete forbidden", lease: heldLease("other", time.Minute, 15), wantErr: true, wantLease: true,
			react: func(cs *fake.Clientset) {
				failing(cs, "delete", apierrors.NewForbidden(leaseGR, leaseName, errors.New("RBAC")))
			}},
		{name: "read fails", lease: heldLease("other", time.Minute, 15), wantErr: true, wantLease: true,
			react: func(cs *fake.Clientset) { failing(cs, "get", apierrors.NewServiceUnavailable("apiserver down")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.lease != nil {
				cs = fake.NewClientset(tc.lease)
			}
			if tc.react != nil {
				tc.react(cs)
			}
			var preconditions *metav1.Preconditions
			cs.PrependReactor("delete", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
				preconditions = a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
				return false, nil, nil
			})
			holder, err := deleteExpiredLease(ctx, cs.CoordinationV1().Leases(leaseNS), leaseName, "me", time.Now())
			if holder != tc.wantHolder || (err != nil) != tc.wantErr {
				t.Errorf("deleteExpiredLease = %q, %v; want %q, error %v", holder, err, tc.wantHolder, tc.wantErr)
			}
			if got := leaseOf(t, cs) != nil; got != tc.wantLease {
				t.Errorf("Lease stored afterwards: %v, want %v", got, tc.wantLease)
			}
			if tc.wantHolder != "" {
				want := &metav1.Preconditions{ResourceVersion: ptr.To("7"), UID: ptr.To(types.UID("lease-uid"))}
				if diff := cmp.Diff(want, preconditions); diff != "" {
					t.Errorf("delete preconditions (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestTakeExpiredGivesUpWhenForbidden: without delete on the Lease (an
// older Role) the elector stops trying after the first refusal and waits
// for expiry as client-go does; other failures are retried next time.
func TestTakeExpiredGivesUpWhenForbidden(t *testing.T) {
	ctx := context.Background()
	gets := func(cs *fake.Clientset) int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	elector := func(cs *fake.Clientset) *Elector {
		return &Elector{lock: leaseLock(cs, "me"), leases: cs.CoordinationV1().Leases(leaseNS), leaseName: leaseName, log: logr.Discard()}
	}

	cs := fake.NewClientset(heldLease("other", time.Minute, 15))
	failing(cs, "delete", apierrors.NewForbidden(leaseGR, leaseName, errors.New("RBAC")))
	e := elector(cs)
	e.takeExpired(ctx)
	e.takeExpired(ctx)
	if !e.cannotDelete.Load() || gets(cs) != 1 {
		t.Errorf("after a Forbidden: cannotDelete %v, %d reads; want true and no read after the first", e.cannotDelete.Load(), gets(cs))
	}

	cs = fake.NewClientset(heldLease("other", time.Minute, 15))
	failing(cs, "delete", apierrors.NewServiceUnavailable("apiserver down"))
	e = elector(cs)
	e.takeExpired(ctx)
	e.takeExpired(ctx)
	if e.cannotDelete.Load() || gets(cs) != 2 {
		t.Errorf("after an outage: cannotDelete %v, %d reads; want false and a second try", e.cannotDelete.Load(), gets(cs))
	}

	cs = fake.NewClientset(heldLease("other", time.Minute, 15))
	elector(cs).takeExpired(ctx)
	if leaseOf(t, cs) != nil {
		t.Error("an expired Lease held by another was not taken")
	}
}

// TestRelease: the Lease is given up (no holder, a one-second duration,
// its transitions kept) only while this replica holds it; another's
// Lease, or none, is left alone.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
	}{
		{"held by this replica", heldLease("me", 0, 15)},
		{"held by another", heldLease("other", 0, 15)},
		{"no Lease", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tc.lease != nil {
				cs = fake.NewClientset(tc.lease)
			}
			e := &Elector{lock: leaseLock(cs, "me"), renewDeadline: time.Second, log: logr.Discard()}
			e.release(ctx)
			got := leaseOf(t, cs)
			switch {
			case tc.lease == nil:
				if got != nil {
					t.Errorf("release created a Lease: %+v", got.Spec)
				}
			case *tc.lease.Spec.HolderIdentity == "me":
				if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != "" || ptr.Deref(got.Spec.LeaseDurationSeconds, 0) != 1 || ptr.Deref(got.Spec.LeaseTransitions, 0) != 3 {
					t.Errorf("released Lease: holder %q, duration %d s, transitions %d; want none, 1 and 3",
						h, ptr.Deref(got.Spec.LeaseDurationSeconds, 0), ptr.Deref(got.Spec.LeaseTransitions, 0))
				}
			default:
				if diff := cmp.Diff(tc.lease.Spec, got.Spec); diff != "" {
					t.Errorf("another's Lease changed (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// termProbe is a leader-only part that records each term it runs in.
type termProbe struct {
	mu      sync.Mutex
	started []time.Time
	running bool
	fail    int // the first fail terms refuse to start
}

func (p *termProbe) setup(m manager.Manager) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = append(p.started, time.Now())
	if len(p.started) <= p.fail {
		return errors.New("cannot set up")
	}
	return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
		p.mu.Lock()
		p.running = true
		p.mu.Unlock()
		<-ctx.Done()
		p.mu.Lock()
		p.running = false
		p.mu.Unlock()
		return nil
	}))
}

func (p *termProbe) state() (terms int, running bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.started), p.running
}

func (p *termProbe) starts() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.started...)
}

// runElector runs an Elector of the given timings over cs as "me", with
// probe as the term's leader-only part; it returns the stop function,
// which waits for Run to return.
func runElector(t *testing.T, cs *fake.Clientset, probe *termProbe, leaseDuration, renewDeadline, retry time.Duration) func() {
	t.Helper()
	terms := NewTerms(servingManager(t, &informertest.FakeInformers{}), nil, time.Second)
	terms.AddLeaderOnly(probe.setup)
	e := &Elector{terms: terms, lock: leaseLock(cs, "me"), leases: cs.CoordinationV1().Leases(leaseNS), leaseName: leaseName,
		leaseDuration: leaseDuration, renewDeadline: renewDeadline, retryPeriod: retry, log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx)
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the elector did not return after its context ended")
		}
	}
}

// TestElectorTakesExpiredLeaseAndReleasesOnShutdown: a Lease whose holder
// stopped renewing long ago is taken at once, not after the lease
// duration client-go would wait; the term runs while the Lease is held;
// shutdown stops the term and only then releases the Lease.
func TestElectorTakesExpiredLeaseAndReleasesOnShutdown(t *testing.T) {
	cs := fake.NewClientset(heldLease("dead", time.Hour, 15))
	probe := &termProbe{}
	// A lease duration far longer than the test's wait: only takeExpired
	// can make this replica lead in time.
	stop := runElector(t, cs, probe, time.Minute, 30*time.Second, 200*time.Millisecond)
	testkit.Eventually(t, 15*time.Second, "a term running", func() bool {
		_, running := probe.state()
		return running
	})
	if l := leaseOf(t, cs); l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "me" {
		t.Fatalf("a term runs but the Lease is %+v; want it held by me", l)
	}
	stop()
	if _, running := probe.state(); running {
		t.Error("the term still runs after the elector returned")
	}
	l := leaseOf(t, cs)
	if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Errorf("after shutdown the Lease is %+v; want it released", l)
	}
}

// TestElectorBacksOffAfterAFailedTerm: a term that fails releases the
// Lease, so another replica may lead, and this replica campaigns again
// only after a lease duration.
func TestElectorBacksOffAfterAFailedTerm(t *testing.T) {
	cs := fake.NewClientset()
	probe := &termProbe{fail: 1}
	const leaseDuration = 2 * time.Second
	stop := runElector(t, cs, probe, leaseDuration, time.Second, 100*time.Millisecond)
	defer stop()
	testkit.Eventually(t, 10*time.Second, "the first term to fail and the Lease to be released", func() (bool, string) {
		n, _ := probe.state()
		l := leaseOf(t, cs)
		if n == 0 || l == nil {
			return false, "no term yet"
		}
		return n == 1 && ptr.Deref(l.Spec.HolderIdentity, "x") == "", "Lease held by " + ptr.Deref(l.Spec.HolderIdentity, "")
	})
	testkit.Eventually(t, 15*time.Second, "a second term running", func() bool {
		_, running := probe.state()
		return running
	})
	starts := probe.starts()
	if gap := starts[1].Sub(starts[0]); gap < leaseDuration {
		t.Errorf("campaigned again %v after the failed term; want at least the lease duration %v", gap, leaseDuration)
	}
}
