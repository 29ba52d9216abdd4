package cluster

import (
	"context"
	"fmt"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
