package replicas

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// killBurst is how many enforcements fall due in the same instant in the
// tests that SIGKILL the leader at its first one.
const killBurst = 60

// enforced counts the TrainJobs of ns that are Failed, or (deletions)
// gone, of the n created. A list, not a watch: with a burst of 60 the
// apiserver may close a watch whose reader the busy test machine holds up.
func (pl *plane) enforced(ctx context.Context, ns string, n int, deletions bool) (int, error) {
	var list trainerv1alpha1.TrainJobList
	if err := pl.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	if deletions {
		return n - len(list.Items), nil
	}
	failed := 0
	for _, tj := range list.Items {
		if meta.IsStatusConditionTrue(tj.Status.Conditions, api.TrainJobFailed) {
			failed++
		}
	}
	return failed, nil
}

// waitEnforced waits until want of the burst are enforced.
func (pl *plane) waitEnforced(t *testing.T, ns string, want int, deletions bool, every, within time.Duration) int {
	t.Helper()
	var got int
	if err := testkit.Poll(every, within, func(ctx context.Context) (bool, error) {
		var err error
		got, err = pl.enforced(ctx, ns, killBurst, deletions)
		return got >= want, err
	}); err != nil {
		t.Fatalf("%d of %d enforcements seen within %v: %v", got, want, within, err)
	}
	return got
}

// killAtFirst SIGKILLs the leader as soon as its first enforcement (a
// status write or a deletion) shows, while the rest of the burst is in
// flight: the moment an Event queued after its action is most likely to
// be lost.
// It returns how many enforcements showed right after the kill.
func (p *pair) killAtFirst(t *testing.T, ns string, deletions bool) int {
	t.Helper()
	p.pl.waitEnforced(t, ns, 1, deletions, 20*time.Millisecond, longTimeout)
	p.leader.Kill()
	n, _ := p.pl.enforced(context.Background(), ns, killBurst, deletions)
	t.Logf("leader SIGKILLed after %d of %d enforcements", n, killBurst)
	if n >= killBurst {
		t.Fatalf("all %d enforcements were done before the kill: the machine is too slow for this burst", n)
	}
	return n
}

// leaderUnaudited is how many of the leader's writes may be stored without
// an audit record: those whose effect showed at the kill (seenAtKill) but
// that the audit log does not give the leader.
func (p *pair) leaderUnaudited(seenAtKill int) func(byUser map[string]int) int {
	return func(byUser map[string]int) int { return max(0, seenAtKill-byUser[p.leaderUser]) }
}
