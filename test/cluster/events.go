package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// EventCounts counts the Events of reason about objects of kind in ns, by
// object name; an Event series counts each of its repetitions.
func EventCounts(ctx context.Context, c client.Reader, ns, kind, reason string) (map[string]int, error) {
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the Events of namespace %s: %w", ns, err)
	}
	n := map[string]int{}
	for _, e := range evs.Items {
		if e.Reason != reason || e.Regarding.Kind != kind {
			continue
		}
		k := 1
		if e.Series != nil && e.Series.Count > 1 {
			k = int(e.Series.Count)
		}
		n[e.Regarding.Name] += k
	}
	return n, nil
}

// CheckEvents waits until each of the objects named has an Event of
// reason, then, after a grace period for late duplicates (a second
// replica, a retried write), checks that none has more than one: an
// enforcement is announced once.
func CheckEvents(t testing.TB, c client.Reader, ns, kind, reason string, names []string, within time.Duration) {
	t.Helper()
	var got map[string]int
	missing := func() []string {
		var m []string
		for _, n := range names {
			if got[n] == 0 {
				m = append(m, n)
			}
		}
		return m
	}
	count := func(ctx context.Context) (bool, error) {
		var err error
		got, err = EventCounts(ctx, c, ns, kind, reason)
		return err == nil && len(missing()) == 0, err
	}
	// Waiting is not the check: the count after the grace period is.
	_ = testkit.Poll(250*time.Millisecond, within, count)
	time.Sleep(2 * time.Second)
	if _, err := count(context.Background()); err != nil {
		t.Fatalf("counting the %s Events of %ss: %v", reason, kind, err)
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("%d of %d %ss have no %s Event (lost): %v", len(m), len(names), kind, reason, m)
	}
	for _, n := range names {
		if got[n] > 1 {
			t.Errorf("%s %s has %d %s Events, want exactly one", kind, n, got[n], reason)
		}
	}
}
