package replicas

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The TrainJob failover tests run on the bed (onBed): Trainer creates each
// job's JobSet, kwok runs and completes the pods, Trainer marks the jobs
// Complete. Where the burst is of deadlines, which Trainer v2.3.0 enforces
// too, Trainer's process is paused (SIGSTOP) once every JobSet exists —
// Trainer lagging behind — so that every enforcement is a replica's, as
// the counts require; its earlier writes are not counted (plane.audited).

// completingImage is an image whose pods kwok completes bed.SucceedAfter
// after they start.
const completingImage = "docker.io/torch-run"

// trainJobsOnBed creates the named TrainJobs on runtime rt of the bed, with
// the given activeDeadlineSeconds per job (nil: none) and pods of image.
func trainJobsOnBed(t *testing.T, ns, rt, image string, jobs []string, deadline func(i int) *int64) {
	t.Helper()
	for i, j := range jobs {
		spec := bed.OnRuntime(rt, image, 1)
		if d := deadline(i); d != nil {
			spec["activeDeadlineSeconds"] = *d
		}
		onBed.suite.TrainJob(t, ns, j, 1, spec)
	}
}

// pauseTrainerWithJobSets waits until Trainer has created every job's
// JobSet, then pauses it; no job may have failed by then.
func pauseTrainerWithJobSets(t *testing.T, ns string, jobs []string) {
	t.Helper()
	for _, j := range jobs {
		onBed.suite.WaitJobSet(t, ns, j)
	}
	onBed.suite.Bed.Trainer.Pause(t)
	if n, err := onBed.enforced(context.Background(), ns, len(jobs), false); err != nil || n > 0 {
		t.Fatalf("%d jobs Failed (err %v) before Trainer was paused: the machine is too slow for this burst", n, err)
	}
}

// TestFailoverMidDeadlineBurst: 30 running TrainJobs whose deadlines
// expire one a second (Trainer paused); the leader is SIGKILLed after 8
// enforcements; the standby takes the Lease over and enforces the rest.
// Every job fails by its deadline exactly once (one Failed transition, one
// successful status write), its JobSet is deleted exactly once (one
// successful delete; a repeat may only find it gone), and each enforcement
// has exactly one DeadlineExceeded Event.
func TestFailoverMidDeadlineBurst(t *testing.T) {
	// In auto, shepherd leaves the deadline to Trainer; here it enforces.
	p := startPair(t, onBed, "--feature="+"trainjob-deadline=on")
	ns := onBed.Namespace(t)
	onBed.suite.DeleteWorkloads(t, ns)
	rt := onBed.suite.RuntimeCopy(t, "failover-deadline", nil).GetName()
	o := onBed.observe(t, ns)

	jobs := make([]string, burstJobs)
	for i := range jobs {
		jobs[i] = jobName(i)
	}
	// The first deadline 20 s after its create: time for Trainer to make
	// every JobSet before it is paused.
	trainJobsOnBed(t, ns, rt, bed.RunForeverImage, jobs, func(i int) *int64 { d := int64(20 + i); return &d })
	pauseTrainerWithJobSets(t, ns, jobs)

	killedAt := p.kill(t, o, false)
	survivor := p.waitTakeover(t)
	leaseTakeover := time.Since(killedAt)
	o.waitCount(t, "TrainJobs Failed", false, burstJobs, longTimeout)

	for _, j := range jobs {
		if err := testkit.Poll(100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
			err := onBed.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: j}, &jobsetv1alpha2.JobSet{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}); err != nil {
			t.Errorf("JobSet %s not deleted: %v", j, err)
		}
	}
	cluster.CheckEvents(t, onBed.Client, ns, api.KindTrainJob, api.EventDeadlineExceeded, jobs, eventsWithin)

	o.mu.Lock()
	for _, j := range jobs {
		if n := o.failedTrans[j]; n != 1 {
			t.Errorf("TrainJob %s turned Failed=True %d times, want exactly once", j, n)
		}
		if r := o.reasons[j]; r != api.ReasonDeadlineExceeded {
			t.Errorf("TrainJob %s Failed with reason %q, want %s", j, r, api.ReasonDeadlineExceeded)
		}
	}
	first, ok := firstAfter(o.failedAt, killedAt)
	errs := o.errs
	o.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the watch of TrainJobs reported errors: %v", errs)
	}
	if !ok {
		t.Fatal("no TrainJob failed after the kill")
	}

	statusBy, statusFailed := writesBy(t, "the Failed status write", onBed.audited(t, ns, "patch", "trainjobs", "status"), jobs)
	deletes := onBed.audited(t, ns, "delete", "jobsets", "")
	deleteBy, deleteFailed := writesBy(t, "the JobSet delete", deletes, jobs)
	p.report(t, "deadline enforcements", statusBy, first.Sub(killedAt))
	t.Logf("Lease taken over %v after the kill; JobSet deletes: leader %d, survivor %d; refused status writes %v",
		leaseTakeover.Round(10*time.Millisecond), deleteBy[p.leaderUser], deleteBy[p.standbyUser], statusFailed)
	// Exactly one delete per JobSet succeeded (writesBy). A repeated
	// request a few milliseconds after it — the reconcile that the status
	// write itself triggers reads the JobSet from a cache that has not yet
	// seen the delete — finds nothing (404, UID precondition) and changes
	// nothing; anything else refused would be a delete of another object.
	redundant := 0
	for j, codes := range deleteFailed {
		for _, c := range codes {
			if c != 404 {
				t.Errorf("a delete of JobSet %s was refused with HTTP %d (want only 404 for a repeat):\n%s", j, c, repeats(deletes, p))
			}
			redundant++
		}
	}
	for _, d := range deletes {
		if d.OK() && d.PreconditionUID() == "" {
			t.Errorf("JobSet %s deleted by %s without a UID precondition", d.ObjectRef.Name, d.User.Username)
		}
	}
	t.Logf("redundant JobSet deletes (404, the JobSet already gone): %d of %d JobSets", redundant, len(jobs))
	p.checkHolder(t, survivor)
}

// TestFailoverMidTTLBurst: 30 TrainJobs on a runtime with a 3 s TTL,
// created one a second, finish one a second as kwok completes their pods
// and Trainer marks them Complete; the leader is SIGKILLed after 8
// deletions; the survivor deletes the rest. Every job is deleted exactly
// once, with its UID as precondition, and has exactly one TTLExpired Event.
func TestFailoverMidTTLBurst(t *testing.T) {
	p := startPair(t, onBed)
	ns := onBed.Namespace(t)
	onBed.suite.Bed.AddNodes(t, ns, bed.Nodes{Count: 1})
	onBed.suite.DeleteWorkloads(t, ns)
	rt := onBed.suite.RuntimeCopy(t, "failover-ttl", map[string]string{api.AnnotationTTLSecondsAfterFinished: "3"}).GetName()
	o := onBed.observe(t, ns)

	jobs := make([]string, burstJobs)
	for i := range jobs {
		jobs[i] = jobName(i)
	}
	// One create a second, through the kill (the kill waits for 8
	// deletions, about 10 s after the first create).
	start := time.Now()
	createErr := make(chan error, 1)
	go func() {
		defer close(createErr)
		for i, j := range jobs {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
			u := bed.TrainJobObject(ns, j, 1, bed.OnRuntime(rt, completingImage, 1))
			if err := onBed.Client.Create(context.Background(), u); err != nil {
				createErr <- fmt.Errorf("creating TrainJob %s: %w", j, err)
				return
			}
		}
	}()

	killedAt := p.kill(t, o, true)
	survivor := p.waitTakeover(t)
	leaseTakeover := time.Since(killedAt)
	if err := <-createErr; err != nil {
		t.Fatal(err)
	}
	o.waitCount(t, "TrainJobs deleted", true, burstJobs, longTimeout+time.Minute)
	cluster.CheckEvents(t, onBed.Client, ns, api.KindTrainJob, api.EventTTLExpired, jobs, eventsWithin)

	o.mu.Lock()
	for _, j := range jobs {
		if n := o.deleted[j]; n != 1 {
			t.Errorf("TrainJob %s deleted %d times, want exactly once", j, n)
		}
	}
	first, ok := firstAfter(o.deletedAt, killedAt)
	errs := o.errs
	o.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("the watch of TrainJobs reported errors: %v", errs)
	}
	if !ok {
		t.Fatal("no TrainJob deleted after the kill")
	}
	deletes := onBed.audited(t, ns, "delete", "trainjobs", "")
	deleteBy, deleteFailed := writesBy(t, "the TTL delete", deletes, jobs)
	p.report(t, "TTL deletions", deleteBy, first.Sub(killedAt))
	t.Logf("Lease taken over %v after the kill; refused TrainJob deletes %v", leaseTakeover.Round(10*time.Millisecond), deleteFailed)
	if len(deleteFailed) > 0 {
		t.Errorf("TrainJob deletes attempted again after the TrainJob was gone (HTTP codes per job): %v", deleteFailed)
	}
	for _, d := range deletes {
		if d.OK() && d.PreconditionUID() == "" {
			t.Errorf("TrainJob %s deleted by %s without a UID precondition", d.ObjectRef.Name, d.User.Username)
		}
	}
	p.checkHolder(t, survivor)
}

// 60 running TrainJobs whose deadlines pass in the same second (Trainer
// paused); the leader is SIGKILLed at its first Failed status write, with
// more in flight. Every job ends Failed once, with exactly one
// DeadlineExceeded Event: the Event is written before the status (under a
// name fixed by the job's UID), so neither the killed leader's in-flight
// writes nor the survivor's redo lose or duplicate one.
func TestSIGKILLAtTheFirstDeadlineLosesNoEvent(t *testing.T) {
	p := startPair(t, onBed, "--feature="+"trainjob-deadline=on")
	ns := onBed.Namespace(t)
	onBed.suite.DeleteWorkloads(t, ns)
	rt := onBed.suite.RuntimeCopy(t, "kill-deadline", nil).GetName()

	// Every deadline passes at due (within a second), whatever the time
	// each create took: the deadline counts from the creation timestamp,
	// which has whole seconds. due leaves time for Trainer to make every
	// JobSet before it is paused.
	due := time.Now().Add(40 * time.Second).Truncate(time.Second)
	jobs := make([]string, killBurst)
	for i := range jobs {
		jobs[i] = jobName(i)
	}
	trainJobsOnBed(t, ns, rt, bed.RunForeverImage, jobs, func(i int) *int64 {
		left := int64(math.Ceil(time.Until(due).Seconds()))
		if left < 10 {
			t.Fatalf("creating %d TrainJobs took past their common deadline: the machine is too slow for this burst", i+1)
		}
		return &left
	})
	pauseTrainerWithJobSets(t, ns, jobs)

	seen := p.killAtFirst(t, ns, false)
	p.waitTakeover(t)
	onBed.waitEnforced(t, ns, killBurst, false, 250*time.Millisecond, longTimeout)
	cluster.CheckEvents(t, onBed.Client, ns, api.KindTrainJob, api.EventDeadlineExceeded, jobs, eventsWithin)
	// Exactly one successful Failed status write per job, by either.
	statusBy, _ := writesByAllowing(t, "the Failed status write", onBed.audited(t, ns, "patch", "trainjobs", "status"), jobs, p.leaderUnaudited(seen))
	t.Logf("Failed status writes: leader %d, survivor %d", statusBy[p.leaderUser], statusBy[p.standbyUser])
}

// 60 TrainJobs created at once on a runtime with a 3 s TTL finish within
// a second or two of each other (kwok completes their pods, Trainer marks
// them Complete), so their TTLs pass together; the leader is SIGKILLed at
// its first deletion. Every job is deleted once, with exactly one
// TTLExpired Event.
func TestSIGKILLAtTheFirstTTLDeletionLosesNoEvent(t *testing.T) {
	p := startPair(t, onBed)
	ns := onBed.Namespace(t)
	onBed.suite.Bed.AddNodes(t, ns, bed.Nodes{Count: 1})
	onBed.suite.DeleteWorkloads(t, ns)
	rt := onBed.suite.RuntimeCopy(t, "kill-ttl", map[string]string{api.AnnotationTTLSecondsAfterFinished: "3"}).GetName()

	jobs := make([]string, killBurst)
	for i := range jobs {
		jobs[i] = jobName(i)
	}
	trainJobsOnBed(t, ns, rt, completingImage, jobs, func(int) *int64 { return nil })

	seen := p.killAtFirst(t, ns, true)
	p.waitTakeover(t)
	onBed.waitEnforced(t, ns, killBurst, true, 250*time.Millisecond, longTimeout+time.Minute)
	cluster.CheckEvents(t, onBed.Client, ns, api.KindTrainJob, api.EventTTLExpired, jobs, eventsWithin)
	deleteBy, _ := writesByAllowing(t, "the TTL delete", onBed.audited(t, ns, "delete", "trainjobs", ""), jobs, p.leaderUnaudited(seen))
	t.Logf("TTL deletes: leader %d, survivor %d", deleteBy[p.leaderUser], deleteBy[p.standbyUser])
}
