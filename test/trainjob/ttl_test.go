package trainjob

import (
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// completing is a TrainJob spec on runtime rt (of kind) whose pod kwok
// completes bed.SucceedAfter after it starts.
func completing(rt, kind string) map[string]any {
	s := bed.OnRuntime(rt, "docker.io/torch-run", 1)
	s["runtimeRef"].(map[string]any)["kind"] = kind
	return s
}

// assertDeletedAfter checks shepherd's delete came ttl after the finish
// (±1 s of the condition's resolution, +5 s of reconcile and the machine)
// with the job's UID as the delete's precondition.
func assertDeletedAfter(t *testing.T, del bed.Write, finished time.Time, ttl time.Duration, uid string) {
	t.Helper()
	after := del.StageTimestamp.Sub(finished)
	t.Logf("finished at %s, deleted by %s %v later", finished.Format(time.RFC3339), del.User.Username, after.Round(100*time.Millisecond))
	if after < ttl-time.Second || after > ttl+5*time.Second {
		t.Errorf("deleted %v after it finished, want its TTL of %v", after, ttl)
	}
	if got := del.PreconditionUID(); got != uid {
		t.Errorf("the TTL delete's UID precondition is %q, want the job's %s", got, uid)
	}
}

// TestTTLFromNamespacedTrainingRuntimeDeletesFinishedJob: a TrainJob on a
// namespaced TrainingRuntime takes that runtime's TTL, not the TTL of a
// ClusterTrainingRuntime of the same name: kept while it runs, deleted by
// shepherd on time once Trainer marks it Complete, with its UID as
// precondition; the garbage collector removes its dependents.
func TestTTLFromNamespacedTrainingRuntimeDeletesFinishedJob(t *testing.T) {
	t.Parallel() // no pause, no serve restart: see the package comment
	ns := start(t, 1)
	const rt, name, ttl = "torch-ns-ttl", "ttl-namespaced", 3
	ttlRuntime(t, rt, "")
	ttlRuntime(t, rt, fmt.Sprint(ttl), bed.Namespaced(ns))
	tj := kit.TrainJob(t, ns, name, 1, completing(rt, api.KindTrainingRuntime))
	kit.Consistently(t, 2*time.Second, "the running TrainJob kept", exists(t, ns, name, ""))
	done := kit.WaitComplete(t, ns, name, within)
	assertDeletedAfter(t, kit.TTLDeletion(t, ns, name, within), done, ttl*time.Second, string(tj.GetUID()))
	kit.DependentsGone(t, ns, name)
}

// TestTTLZeroDeletesAtOnce: a TTL of 0 deletes the job as soon as it
// completes, with a TTLExpired Event and shepherd's metric.
func TestTTLZeroDeletesAtOnce(t *testing.T) {
	// Serial: the metric is read before and after.
	ns := start(t, 1)
	const rt, name = "torch-ttl-zero", "ttl-zero"
	ttlRuntime(t, rt, "0")
	before := cluster.MetricOf(t, "shepherd_trainjob_ttl_deletions_total")
	tj := kit.TrainJob(t, ns, name, 1, completing(rt, api.KindClusterTrainingRuntime))
	// Gone as soon as Trainer marks it Complete: too soon for a poll to
	// read the condition, so the finish is Trainer's status write.
	del := kit.TTLDeletion(t, ns, name, within)
	assertDeletedAfter(t, del, lastStatusWrite(t, ns, name, bed.TrainerUser), 0, string(tj.GetUID()))
	if evs := kit.Events(t, ns, name, api.EventTTLExpired); len(evs) != 1 {
		t.Errorf("TTLExpired Events %+v, want one", evs)
	}
	if after := cluster.MetricOf(t, "shepherd_trainjob_ttl_deletions_total"); after-before != 1 {
		t.Errorf("shepherd_trainjob_ttl_deletions_total went from %v to %v, want +1", before, after)
	}
}

// lastStatusWrite is when user last wrote the TrainJob's status.
func lastStatusWrite(t *testing.T, ns, name, user string) time.Time {
	t.Helper()
	ws := kit.SuccessfulWrites(t, "trainjobs", ns, name, user, "status")
	if len(ws) == 0 {
		t.Fatalf("no status write of TrainJob %s by %s", name, user)
	}
	return ws[len(ws)-1].StageTimestamp
}

// TestDeadlineThenTTLZero: a job failed by its deadline is finished: a TTL
// of 0 deletes it next, and its dependents go.
func TestDeadlineThenTTLZero(t *testing.T) {
	t.Parallel() // no pause, no serve restart: see the package comment
	ns := start(t, 1)
	const rt, name = "torch-deadline-ttl", "deadline-ttl"
	ttlRuntime(t, rt, "0")
	spec := bed.OnRuntime(rt, bed.RunForeverImage, 1)
	spec["activeDeadlineSeconds"] = int64(3)
	tj := kit.TrainJob(t, ns, name, 1, spec)
	del := kit.TTLDeletion(t, ns, name, within)
	if got := del.PreconditionUID(); got != string(tj.GetUID()) {
		t.Errorf("the TTL delete's UID precondition is %q, want the job's %s", got, tj.GetUID())
	}
	// The deadline's JobSet delete is Trainer's or shepherd's (both
	// enforce it here).
	kit.DependentsGone(t, ns, name, bed.TrainerUser, shepherdUser)
}

// TestNoTTLKeepsJobUntilRuntimeGetsOne: without a TTL a finished job stays;
// a TTL its runtime gets later applies (shepherd watches runtimes).
func TestNoTTLKeepsJobUntilRuntimeGetsOne(t *testing.T) {
	t.Parallel() // no pause, no serve restart: see the package comment
	ns := start(t, 1)
	const rt, name = "torch-no-ttl", "no-ttl"
	u := ttlRuntime(t, rt, "")
	kit.TrainJob(t, ns, name, 1, completing(rt, api.KindClusterTrainingRuntime))
	kit.WaitComplete(t, ns, name, within)
	kit.Consistently(t, 4*time.Second, "a finished TrainJob without a TTL kept", exists(t, ns, name, ""))
	setTTL(t, u, "0")
	kit.TTLDeletion(t, ns, name, within)
}

// TestRecreatedJobNotDeletedByOldTTL: a finished TrainJob deleted by its
// user before its TTL and created again under the same name (running)
// is not deleted when the old one's TTL would have expired.
//
// The new job is created once the garbage collector has removed the old
// one's JobSet: Trainer names the JobSet after the job and applies it over
// one still there, so a new job created before would take the old
// JobSet's completion as its own — Trainer's, not shepherd's doing.
func TestRecreatedJobNotDeletedByOldTTL(t *testing.T) {
	t.Parallel() // no pause, no serve restart: see the package comment
	ns := start(t, 1)
	const rt, name, ttl = "torch-recreated", "recreated", 15
	ttlRuntime(t, rt, fmt.Sprint(ttl))
	old := kit.TrainJob(t, ns, name, 1, completing(rt, api.KindClusterTrainingRuntime))
	done := kit.WaitComplete(t, ns, name, within)
	if err := kit.Cluster.Client.Delete(t.Context(), old.DeepCopy()); err != nil {
		t.Fatalf("deleting the finished TrainJob as its user: %v", err)
	}
	kit.Eventually(t, within, "the first TrainJob gone", func() (bool, string) {
		return kit.GetTrainJob(t, ns, name) == nil, "still there"
	})
	kit.DependentsGone(t, ns, name)
	if time.Since(done) > (ttl-5)*time.Second {
		t.Fatalf("the old job's dependents took %v to go: the machine is too slow for a %d s TTL", time.Since(done), ttl)
	}
	fresh := kit.TrainJob(t, ns, name, 1, bed.OnRuntime(rt, bed.RunForeverImage, 1))
	if fresh.GetUID() == old.GetUID() {
		t.Fatalf("the recreated TrainJob has the old UID %s", old.GetUID())
	}
	time.Sleep(time.Until(done.Add(ttl * time.Second)))
	kit.Consistently(t, 4*time.Second, "the recreated, running TrainJob kept past the old one's TTL", exists(t, ns, name, string(fresh.GetUID())))
	for _, d := range deletesBy(t, "trainjobs", ns, name, shepherdUser) {
		t.Errorf("shepherd deleted a TrainJob %s: %s", name, d.String())
	}
}

// TestMalformedTTLCarrierKeepsJobsAndWarnsOnce: a carrier that does not
// parse (stored while V-TR-1, which denies it at admission, was disabled)
// is no TTL: finished jobs are kept, and the runtime gets one Warning Event
// however many of its jobs are reconciled. Fixing the carrier applies it.
func TestMalformedTTLCarrierKeepsJobsAndWarnsOnce(t *testing.T) {
	kit.ServeWith(t, "--disable-rules=V-TR-1")
	ns := start(t, 2)
	const rt = "torch-bad-ttl"
	u := ttlRuntime(t, rt, "1h")
	names := []string{"bad-ttl-a", "bad-ttl-b"}
	for _, n := range names {
		kit.TrainJob(t, ns, n, 1, completing(rt, api.KindClusterTrainingRuntime))
	}
	for _, n := range names {
		kit.WaitComplete(t, ns, n, within)
	}
	invalid := func() []eventsv1.Event {
		// A cluster-scoped object's Events live in namespace default.
		return kit.Events(t, metav1.NamespaceDefault, rt, api.EventInvalidKnob)
	}
	kit.Eventually(t, within, "an InvalidKnob Event on the runtime", func() (bool, string) {
		return len(invalid()) > 0, "none yet"
	})
	for _, n := range names {
		kit.Consistently(t, 2*time.Second, "a finished TrainJob whose runtime's TTL does not parse kept", exists(t, ns, n, ""))
	}
	if evs := invalid(); len(evs) != 1 || evs[0].Type != "Warning" || (evs[0].Series != nil && evs[0].Series.Count > 1) {
		t.Errorf("InvalidKnob Events on the runtime = %+v, want one Warning, recorded once", evs)
	}
	setTTL(t, u, "0")
	for _, n := range names {
		kit.TTLDeletion(t, ns, n, within)
	}
}

// TestTTLAddedLaterCountsFromWhenItWasSet: a TTL added to a runtime does
// not delete its old finished jobs at once (KEP-2899: no retro-applied
// defaults); it counts from when it was set — read from the runtime's
// managedFields, so a shepherd restarted in between keeps the same expiry.
func TestTTLAddedLaterCountsFromWhenItWasSet(t *testing.T) {
	ns := start(t, 1)
	const rt, name, ttl = "torch-ttl-later", "ttl-added-later", 10
	u := ttlRuntime(t, rt, "")
	kit.TrainJob(t, ns, name, 1, completing(rt, api.KindClusterTrainingRuntime))
	done := kit.WaitComplete(t, ns, name, within)
	// Finished more than ttl before the TTL appears: counted from the
	// finish it would already have expired.
	time.Sleep(time.Until(done.Add((ttl + 2) * time.Second)))
	setTTL(t, u, fmt.Sprint(ttl))
	set := time.Now()
	kit.ServeDown(t)()
	// Kept while the TTL runs, counted from when it was set: the restart
	// above takes part of it (seconds on a loaded machine, which once left
	// a fixed 2 s window starting after the TTL had passed), so the window
	// ends a second before the TTL does. The deletion's own time is checked
	// below either way.
	if left := time.Until(set.Add((ttl - 1) * time.Second)); left > 0 {
		kit.Consistently(t, left, "the old finished TrainJob kept while the TTL set on its runtime runs", exists(t, ns, name, ""))
	}
	del := kit.TTLDeletion(t, ns, name, within)
	after := del.StageTimestamp.Sub(set)
	t.Logf("finished %v before the TTL of %ds was set; deleted %v after it was set", set.Sub(done).Round(time.Second), ttl, after.Round(100*time.Millisecond))
	if after < (ttl-1)*time.Second {
		t.Errorf("deleted %v after the TTL of %ds was set, before it passed", after, ttl)
	}
}
