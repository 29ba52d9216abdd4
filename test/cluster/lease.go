package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// LeaseHolder returns the holderIdentity of Lease ns/name, "" while nobody
// holds it (or it does not exist yet), and the Lease when there is one.
func LeaseHolder(ctx context.Context, c client.Reader, ns, name string) (string, *coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, nil
		}
		return "", nil, fmt.Errorf("reading Lease %s/%s: %w", ns, name, err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", &l, nil
	}
	return *l.Spec.HolderIdentity, &l, nil
}

// AwaitHolder waits until someone other than each of not holds Lease
// ns/name, and returns the holder and when it was first seen. It asks
// every 100 ms, the resolution the failover tests time takeovers at; a
// failed read does not end the wait (the apiserver may be on its way
// back).
func AwaitHolder(t testing.TB, c client.Reader, ns, name string, within time.Duration, not ...string) (string, time.Time) {
	t.Helper()
	var id string
	if err := testkit.Poll(100*time.Millisecond, within, func(ctx context.Context) (bool, error) {
		var err error
		id, _, err = LeaseHolder(ctx, c, ns, name)
		return id != "" && !slices.Contains(not, id), err
	}); err != nil {
		t.Fatalf("no replica (other than %q) took Lease %s/%s: %v (last holder %q)", not, ns, name, err, id)
	}
	return id, time.Now()
}
