package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// failedByShepherd waits until the TrainJob is Failed with reason
// DeadlineExceeded while Trainer is paused, and checks the write was
// shepherd's: one status write by shepherd, none by Trainer since pausedAt
// (Trainer cannot write while paused: the check is of the audit log, not
// of that premise). It returns the condition.
func failedByShepherd(t *testing.T, ns, name string) metav1.Condition {
	t.Helper()
	c := kit.WaitCondition(t, ns, name, "Failed", within)
	if c.Reason != api.ReasonDeadlineExceeded || c.Message != api.MessageDeadlineExceeded {
		t.Errorf("Failed condition %s: %q, want %s: %q", c.Reason, c.Message, api.ReasonDeadlineExceeded, api.MessageDeadlineExceeded)
	}
	if ws := kit.SuccessfulWrites(t, "trainjobs", ns, name, shepherdUser, "status"); len(ws) != 1 {
		t.Errorf("shepherd wrote the TrainJob's status %d times, want once:\n%s", len(ws), bed.Lines(ws))
	}
	return c
}

// afterTrainerResumes lets Trainer go on and checks what two enforcers
// leave: the job stays Failed with reason DeadlineExceeded, shepherd
// writes its status no more, and the job ends with no JobSet. Trainer,
// resumed, may reconcile on the JobSet's deletion from a cache that has
// not yet seen the Failed status: it applies the JobSet once more, fails
// the job again (a new lastTransitionTime) and deletes that JobSet itself
// (docs/concepts.md, "Lifecycle features"). That is logged, not failed:
// it is Trainer's, and why auto leaves the deadline to Trainer.
//
// The pause can also land inside a Trainer reconcile that read the job
// before shepherd failed it. Trainer v2.3.0 writes status as a merge
// patch of what it read, with no resourceVersion (trainjob_controller.go,
// client.MergeFrom), and a patch that sets conditions replaces the list:
// that reconcile, finishing, erases shepherd's Failed until the job is
// failed again. Only then is the condition allowed to lapse, once, and
// shepherd to write once more for each such patch: the audit log must
// show the Trainer patch that erased it.
func afterTrainerResumes(t *testing.T, ns, name string, failed metav1.Condition) {
	t.Helper()
	if _, trainer := statusWrites(t, ns, name); !bodiesLogged(trainer) {
		t.Errorf("the audit log holds no body of Trainer's status writes to %s/%s: a write that erased Failed could not be told", ns, name)
	}
	kit.Bed.Trainer.Resume(t)
	last, lapse := failedFor(t, ns, name, 5*time.Second)
	if lapse != "" {
		erasers := erasedFailed(statusWrites(t, ns, name))
		if len(erasers) == 0 {
			t.Fatalf("the job Failed by its deadline, with Trainer running again: no longer so: %s, and no Trainer status write removed the condition", lapse)
		}
		t.Logf("Trainer, resumed, finished a reconcile that read the job before it failed and erased the Failed condition (%s):\n%s", lapse, bed.Lines(erasers))
		kit.Eventually(t, within, "the job Failed by its deadline again", func() (bool, string) {
			c, why := deadlineFailed(t, ns, name)
			return c != nil, why
		})
		if last, lapse = failedFor(t, ns, name, 5*time.Second); lapse != "" {
			t.Fatalf("the job Failed by its deadline again, with Trainer running: no longer so: %s", lapse)
		}
	}
	// An erasure shepherd mends before a poll sees it leaves no lapse,
	// only the patch and shepherd's write after it.
	mine, trainer := statusWrites(t, ns, name)
	if erasers := erasedFailed(mine, trainer); len(mine) < 1 || len(mine) > 1+len(erasers) {
		t.Errorf("shepherd wrote the TrainJob's status %d times, want once and once more for each of %d Trainer patches that erased Failed:\n%s", len(mine), len(erasers), bed.Lines(mine))
	}
	kit.Eventually(t, within, "no JobSet left", func() (bool, string) {
		js := &unstructured.Unstructured{}
		js.SetGroupVersionKind(bed.JobSetGVK)
		err := kit.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, js)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if n := kit.Creators(t, "jobsets", ns)[bed.TrainerUser]; n > 1 || !last.LastTransitionTime.Equal(&failed.LastTransitionTime) {
		t.Logf("Trainer, resumed, applied the JobSet %d times in all; the Failed condition's time is %s (shepherd wrote %s)",
			n, last.LastTransitionTime.Format(time.RFC3339), failed.LastTransitionTime.Format(time.RFC3339))
	}
}

// deadlineFailed is the TrainJob's Failed condition when the job is Failed
// by its deadline; otherwise nil, and what it saw.
func deadlineFailed(t *testing.T, ns, name string) (*metav1.Condition, string) {
	u := kit.GetTrainJob(t, ns, name)
	if u == nil {
		return nil, "the TrainJob is gone"
	}
	c := bed.Condition(u, "Failed")
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != api.ReasonDeadlineExceeded {
		return nil, fmt.Sprintf("the Failed condition is %+v", c)
	}
	return c, ""
}

// failedFor watches the TrainJob for d: it returns the Failed condition
// last seen and, if the job stopped being Failed by its deadline, what it
// saw then ("" if it held throughout).
func failedFor(t *testing.T, ns, name string, d time.Duration) (last metav1.Condition, lapse string) {
	t.Helper()
	err := testkit.Holds(testkit.Interval, d, func() (bool, string) {
		c, why := deadlineFailed(t, ns, name)
		if c != nil {
			last = *c
		}
		return c != nil, why
	})
	if err != nil {
		return last, err.Error()
	}
	return last, ""
}

// statusWrites are the successful status writes to the TrainJob by
// shepherd and by Trainer, oldest first, from one read of the audit log.
func statusWrites(t *testing.T, ns, name string) (mine, trainer []bed.Write) {
	t.Helper()
	ws, err := kit.Bed.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if !w.OK() || w.ObjectRef.Subresource != "status" {
			continue
		}
		switch w.User.Username {
		case shepherdUser:
			mine = append(mine, w)
		case bed.TrainerUser:
			trainer = append(trainer, w)
		}
	}
	return mine, trainer
}

// bodiesLogged reports whether the audit log holds the body of every one
// of Trainer's status writes, and there is one (Trainer reports the
// JobSet's jobs before the test pauses it): without them erasedFailed
// could find nothing whatever Trainer did.
func bodiesLogged(trainer []bed.Write) bool {
	for _, w := range trainer {
		if len(w.RequestObject) == 0 {
			return false
		}
	}
	return len(trainer) > 0
}

// erasedFailed are Trainer's status writes after shepherd's first whose
// body sets the conditions without Failed: each replaces the list and so
// erases the condition.
func erasedFailed(mine, trainer []bed.Write) []bed.Write {
	if len(mine) == 0 {
		return nil
	}
	var out []bed.Write
	for _, w := range trainer {
		if w.StageTimestamp.Before(mine[0].StageTimestamp) {
			continue
		}
		if cs, ok := w.StatusConditions(); ok && meta.FindStatusCondition(cs, "Failed") == nil {
			out = append(out, w)
		}
	}
	return out
}

// TestDeadlineFailsJobAndDeletesJobSet: a running TrainJob past its
// activeDeadlineSeconds, Trainer lagging: shepherd fails it
// (DeadlineExceeded, not before the window closed), deletes its JobSet
// with the JobSet's UID as precondition, records a Warning Event and its
// metric; the garbage collector removes the Jobs and pods. Trainer, back,
// leaves it so.
func TestDeadlineFailsJobAndDeletesJobSet(t *testing.T) {
	ns := start(t, 1)
	const name = "deadline"
	before := cluster.MetricOf(t, "shepherd_trainjob_deadline_exceeded_total")
	tj := running(t, ns, name, map[string]any{"activeDeadlineSeconds": int64(6)})
	js := kit.WaitJobSet(t, ns, name)
	kit.Bed.Trainer.Pause(t)

	c := failedByShepherd(t, ns, name)
	if early := c.LastTransitionTime.Sub(tj.GetCreationTimestamp().Time); early < 5*time.Second {
		t.Errorf("Failed %v after creation, before the 6 s deadline (the condition's time has 1 s resolution)", early)
	}
	kit.Eventually(t, within, "the JobSet, its Job and pod gone", func() (bool, string) {
		n := kit.Creators(t, "jobsets", ns)
		left := countPods(t, ns, "Running")
		return kit.GetTrainJob(t, ns, name) != nil && left == 0 && len(deletesBy(t, "jobsets", ns, name, shepherdUser)) == 1,
			"JobSet creators " + fmt.Sprint(n) + ", pods " + kit.PodSummary(ns)
	})
	del := deletesBy(t, "jobsets", ns, name, shepherdUser)
	if len(del) != 1 || del[0].PreconditionUID() != string(js.GetUID()) {
		t.Errorf("shepherd's JobSet deletes %s, want one with UID precondition %s", bed.Lines(del), js.GetUID())
	}
	if evs := kit.Events(t, ns, name, api.EventDeadlineExceeded); len(evs) != 1 || evs[0].Type != "Warning" {
		t.Errorf("DeadlineExceeded Events %+v, want one Warning", evs)
	}
	if after := cluster.MetricOf(t, "shepherd_trainjob_deadline_exceeded_total"); after-before != 1 {
		t.Errorf("shepherd_trainjob_deadline_exceeded_total went from %v to %v, want +1", before, after)
	}
	afterTrainerResumes(t, ns, name, c)
}

// TestNoDeadlineNeverFails: a running TrainJob without a deadline is left
// alone: not failed, and shepherd writes nothing to it.
func TestNoDeadlineNeverFails(t *testing.T) {
	t.Parallel() // no pause, no serve restart: see the package comment
	ns := start(t, 1)
	const name = "no-deadline"
	running(t, ns, name, nil)
	kit.Consistently(t, 5*time.Second, "a TrainJob without a deadline not Failed", notFailed(t, ns, name))
	ws, err := kit.Bed.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(ws, shepherdUser); len(mine) != 0 {
		t.Errorf("shepherd wrote a TrainJob without a deadline %d times, want never:\n%s", len(mine), bed.Lines(mine))
	}
}

// TestCreatedSuspendedJobStartsAtFirstResume: a TrainJob created suspended
// never fails while suspended however long it waits; its window runs from
// the resume Trainer reports (Suspended=False, Resumed).
func TestCreatedSuspendedJobStartsAtFirstResume(t *testing.T) {
	ns := start(t, 1)
	const name = "created-suspended"
	kit.TrainJob(t, ns, name, 1, map[string]any{"activeDeadlineSeconds": int64(3), "suspend": true})
	waitSuspended(t, ns, name, metav1.ConditionTrue, "Suspended")
	kit.Consistently(t, 8*time.Second, "a suspended TrainJob not Failed, past twice its deadline", notFailed(t, ns, name))

	kit.SetSuspend(t, ns, name, false)
	resumed := waitSuspended(t, ns, name, metav1.ConditionFalse, "Resumed")
	kit.Bed.Trainer.Pause(t)
	c := failedByShepherd(t, ns, name)
	if d := c.LastTransitionTime.Sub(resumed.LastTransitionTime.Time); d < 3*time.Second {
		t.Errorf("Failed %v after the resume, before the 3 s window from it", d)
	}
	afterTrainerResumes(t, ns, name, c)
}

// TestSuspendThenResumeResetsWindow: a running TrainJob suspended and
// resumed gets its whole window again from the resume.
func TestSuspendThenResumeResetsWindow(t *testing.T) {
	ns := start(t, 1)
	const name = "suspend-resume"
	tj := running(t, ns, name, map[string]any{"activeDeadlineSeconds": int64(8)})
	created := tj.GetCreationTimestamp().Time
	kit.SetSuspend(t, ns, name, true)
	waitSuspended(t, ns, name, metav1.ConditionTrue, "Suspended")
	if ok, why := notFailed(t, ns, name)(); !ok {
		t.Fatalf("Failed before it was suspended (%s): the machine is too slow for an 8 s deadline", why)
	}
	// Past the first window while suspended: still not Failed.
	time.Sleep(time.Until(created.Add(9 * time.Second)))
	kit.Consistently(t, 2*time.Second, "a suspended TrainJob not Failed past its first window", notFailed(t, ns, name))

	kit.SetSuspend(t, ns, name, false)
	resumed := waitSuspended(t, ns, name, metav1.ConditionFalse, "Resumed")
	kit.Bed.Trainer.Pause(t)
	c := failedByShepherd(t, ns, name)
	if d := c.LastTransitionTime.Sub(resumed.LastTransitionTime.Time); d < 8*time.Second {
		t.Errorf("Failed %v after the resume, before the whole 8 s window from it", d)
	}
	afterTrainerResumes(t, ns, name, c)
}

// TestRestartMidDeadlineStillEnforces: shepherd down across the deadline
// (and Trainer lagging): the serve started again, with no memory of the
// one before, fails the job at once.
func TestRestartMidDeadlineStillEnforces(t *testing.T) {
	ns := start(t, 1)
	const name = "restart"
	tj := running(t, ns, name, map[string]any{"activeDeadlineSeconds": int64(4)})
	kit.Bed.Trainer.Pause(t)
	up := kit.ServeDown(t)
	time.Sleep(time.Until(tj.GetCreationTimestamp().Add(6 * time.Second)))
	if ok, why := notFailed(t, ns, name)(); !ok {
		t.Fatalf("Failed while shepherd was down and Trainer paused: %s", why)
	}
	up()
	c := failedByShepherd(t, ns, name)
	afterTrainerResumes(t, ns, name, c)
}

// TestRestartBeforeDeadlineEnforcesOnTime: shepherd restarted before the
// deadline requeues at the deadline it derives again: the job fails not
// before its window closed.
func TestRestartBeforeDeadlineEnforcesOnTime(t *testing.T) {
	ns := start(t, 1)
	const name = "restart-early"
	tj := running(t, ns, name, map[string]any{"activeDeadlineSeconds": int64(8)})
	// Trainer paused first: on a loaded machine the restart can take long
	// enough for Trainer to enforce the deadline itself meanwhile.
	kit.Bed.Trainer.Pause(t)
	kit.ServeDown(t)()
	c := failedByShepherd(t, ns, name)
	if early := c.LastTransitionTime.Sub(tj.GetCreationTimestamp().Time); early < 7*time.Second {
		t.Errorf("Failed %v after creation, before the 8 s deadline (the condition's time has 1 s resolution)", early)
	}
	afterTrainerResumes(t, ns, name, c)
}
