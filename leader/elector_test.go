package leader

import (
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
)

// A Lease is taken over early only when someone else holds it and has not
// renewed it for longer than its duration; released Leases and this
// replica's own need no delete (the elector takes them at once).
func TestLeaseExpired(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewedAgo time.Duration, seconds int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-renewedAgo)},
			LeaseDurationSeconds: ptr.To(seconds),
		}}
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  bool
	}{
		{"renewed within its duration", lease("other", 10*time.Second, 15), false},
		{"renewed exactly its duration ago", lease("other", 15*time.Second, 15), false},
		{"not renewed for longer than its duration", lease("other", 16*time.Second, 15), true},
		{"this replica's own, expired", lease("me", time.Minute, 15), false},
		{"released (no holder)", lease("", time.Minute, 1), false},
		{"no holder field", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now.Add(-time.Hour)}, LeaseDurationSeconds: ptr.To[int32](15)}}, false},
		{"never renewed", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](15)}}, false},
	} {
		if got := leaseExpired(tc.lease, "me", now); got != tc.want {
			t.Errorf("%s: leaseExpired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// nopRecorders is the recorder.Provider a Lease lock needs to be built.
type nopRecorders struct{ recorder.Provider }

func (nopRecorders) GetEventRecorderFor(string) record.EventRecorder { return &record.FakeRecorder{} }

// The Lease's namespace: --leader-election-namespace, else $POD_NAMESPACE
// (as the certificate code), else the service account's namespace, else
// shepherd-system — out of a pod too, where controller-runtime's own default
// knows only the service account's file.
func TestLeaseNamespace(t *testing.T) {
	lockNamespace := func(t *testing.T, flag string) string {
		t.Helper()
		o := ElectionOptions{ID: "shepherd.shepherd.dev", Namespace: flag, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
		e, err := NewElector(&rest.Config{Host: "https://127.0.0.1:1"}, nopRecorders{}, &Terms{log: logr.Discard()}, o)
		if err != nil {
			t.Fatalf("NewElector: %v", err)
		}
		ll, ok := e.lock.(*resourcelock.LeaseLock)
		if !ok {
			t.Fatalf("lock is %T, want a Lease", e.lock)
		}
		return ll.LeaseMeta.Namespace
	}
	t.Setenv("POD_NAMESPACE", "from-env")
	if got := lockNamespace(t, "from-flag"); got != "from-flag" {
		t.Errorf("flag and POD_NAMESPACE: Lease in %q, want from-flag", got)
	}
	if got := lockNamespace(t, ""); got != "from-env" {
		t.Errorf("POD_NAMESPACE: Lease in %q, want from-env", got)
	}
	if got, want := lockNamespace(t, ""), certs.DefaultOptions().Namespace; got != want {
		t.Errorf("the Lease in %q, the certificate Secret in %q: want the same default", got, want)
	}
	t.Setenv("POD_NAMESPACE", "")
	if got, want := LeaseNamespace(""), api.OwnNamespace(); got != want {
		t.Errorf("no flag, no POD_NAMESPACE: %q, want %q (the service account's, else %s)", got, want, api.DefaultNamespace)
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); os.IsNotExist(err) {
		if got := lockNamespace(t, ""); got != api.DefaultNamespace {
			t.Errorf("out of a pod, no POD_NAMESPACE: Lease in %q, want %q", got, api.DefaultNamespace)
		}
	}
}
