package app

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
