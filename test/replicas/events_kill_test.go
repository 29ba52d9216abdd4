package replicas

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// killBurst is how many enforcements fall due in the same instant in the
// tests that SIGKILL the leader at its first one.
const killBurst = 60

// enforced counts the TrainJobs of ns that are Failed, or (deletions)
// gone, of the n created. A list, not a watch: with a burst of 60 the
// apiserver may close a watch whose reader the busy test machine holds up.
func enforced(ctx context.Context, ns string, n int, deletions bool) (int, error) {
	var list trainerv1alpha1.TrainJobList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
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
func waitEnforced(t *testing.T, ns string, want int, deletions bool, every, within time.Duration) int {
	t.Helper()
	var got int
	if err := wait.PollUntilContextTimeout(context.Background(), every, within, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = enforced(ctx, ns, killBurst, deletions)
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
	waitEnforced(t, ns, 1, deletions, 20*time.Millisecond, longTimeout)
	p.leader.Kill()
	n, _ := enforced(context.Background(), ns, killBurst, deletions)
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

// 60 TrainJobs whose deadlines pass in the same second; the leader is
// SIGKILLed at its first Failed status write, with more in flight. Every
// job ends Failed once, with exactly one DeadlineExceeded Event: the
// Event is written before the status (under a name fixed by the job's
// UID), so neither the killed leader's in-flight writes nor the
// survivor's redo lose or duplicate one.
func TestSIGKILLAtTheFirstDeadlineLosesNoEvent(t *testing.T) {
	p := startPair(t, "--feature="+"trainjob-deadline=on")
	ns := env.Namespace(t)
	rt := createRuntime(t, "")

	// Every deadline passes at due (within a second), whatever the time
	// each create took: the deadline counts from the creation timestamp,
	// which has whole seconds.
	due := time.Now().Add(15 * time.Second).Truncate(time.Second)
	jobs := make([]string, killBurst)
	for i := range jobs {
		jobs[i] = jobName(i)
		left := int64(math.Ceil(time.Until(due).Seconds()))
		if left < 2 {
			t.Fatalf("creating %d TrainJobs took past their common deadline: the machine is too slow for this burst", i+1)
		}
		tj := newJob(ns, jobs[i], rt, ptr.To(left))
		if err := env.Client.Create(context.Background(), tj); err != nil {
			t.Fatalf("creating TrainJob %s: %v", tj.Name, err)
		}
		createJobSet(t, tj)
	}

	seen := p.killAtFirst(t, ns, false)
	p.waitTakeover(t)
	waitEnforced(t, ns, killBurst, false, 250*time.Millisecond, longTimeout)
	checkEvents(t, ns, api.EventDeadlineExceeded, jobs)
	// Exactly one successful Failed status write per job, by either.
	statusBy, _ := writesByAllowing(t, "the Failed status write", audited(t, ns, "patch", "trainjobs", "status"), jobs, p.leaderUnaudited(seen))
	t.Logf("Failed status writes: leader %d, survivor %d", statusBy[p.leaderUser], statusBy[p.standbyUser])
}

// 60 finished TrainJobs whose runtime's TTL passes in the same second;
// the leader is SIGKILLed at its first deletion. Every job is deleted
// once, with exactly one TTLExpired Event.
func TestSIGKILLAtTheFirstTTLDeletionLosesNoEvent(t *testing.T) {
	p := startPair(t)
	ns := env.Namespace(t)
	rt := createRuntime(t, "3")

	jobs := make([]string, killBurst)
	created := make([]*trainerv1alpha1.TrainJob, killBurst)
	for i := range jobs {
		jobs[i] = jobName(i)
		created[i] = newJob(ns, jobs[i], rt, nil)
		if err := env.Client.Create(context.Background(), created[i]); err != nil {
			t.Fatalf("creating TrainJob %s: %v", jobs[i], err)
		}
	}
	// Trainer's part, played: every job finishes in the same instant (the
	// same completion time), in parallel.
	finished := metav1.NewTime(time.Now().Truncate(time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, killBurst)
	for _, tj := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			orig := tj.DeepCopy()
			meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
				Type: api.TrainJobComplete, Status: metav1.ConditionTrue, Reason: "JobSetCompleted",
				Message: "set by the test, playing Trainer", LastTransitionTime: finished,
			})
			if err := env.Client.Status().Patch(context.Background(), tj, client.MergeFrom(orig)); err != nil {
				errs <- fmt.Errorf("marking %s Complete: %w", tj.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	seen := p.killAtFirst(t, ns, true)
	p.waitTakeover(t)
	waitEnforced(t, ns, killBurst, true, 250*time.Millisecond, longTimeout)
	checkEvents(t, ns, api.EventTTLExpired, jobs)
	deleteBy, _ := writesByAllowing(t, "the TTL delete", audited(t, ns, "delete", "trainjobs", ""), jobs, p.leaderUnaudited(seen))
	t.Logf("TTL deletes: leader %d, survivor %d", deleteBy[p.leaderUser], deleteBy[p.standbyUser])
}
