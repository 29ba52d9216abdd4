package trainjob

import (
	"context"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	jobsetv1alpha2 "github.com/shepherd-k8s/shepherd/api/jobset/v1alpha2"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// sleepUntil lets real time pass until at: the deadline must be able to
// expire while the test holds the job in some state. It asserts nothing.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

func TestDeadlineFailsJobAndDeletesJobSet(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "deadline", rt.Name, ptr.To[int64](3))
	create(t, tj)
	js := createJobSet(t, tj)

	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	c, err := failedCondition(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	if c.Message != api.MessageDeadlineExceeded {
		t.Errorf("Failed message = %q, want %q", c.Message, api.MessageDeadlineExceeded)
	}
	// Object state, not wall clock: the job was not failed before its window
	// of 3 s from creation closed.
	if early := c.LastTransitionTime.Sub(tj.CreationTimestamp.Time); early < 3*time.Second {
		t.Errorf("Failed %v after creation, before the 3s deadline", early)
	}
	eventually(t, "the JobSet deleted", gone(js))
	// Other tests run in parallel, so only a lower bound holds.
	if v := metricValue(t, "shepherd_trainjob_deadline_exceeded_total"); v < 1 {
		t.Errorf("shepherd_trainjob_deadline_exceeded_total = %v, want >= 1", v)
	}
	if v := metricValue(t, "shepherd_trainjob_reconcile_duration_seconds"); v < 1 {
		t.Errorf("shepherd_trainjob_reconcile_duration_seconds has %v samples, want >= 1", v)
	}
	eventually(t, "a DeadlineExceeded event on the TrainJob", func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == api.KindTrainJob && e.Regarding.Name == tj.Name && e.Reason == api.EventDeadlineExceeded && e.Type == "Warning" {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestDeadlineWithoutJobSetStillFails(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "no-jobset", rt.Name, ptr.To[int64](1))
	create(t, tj)
	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
}

func TestNoDeadlineNeverFails(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "no-deadline", rt.Name, nil)
	create(t, tj)
	consistently(t, "TrainJob without a deadline not Failed", 4*time.Second, func(ctx context.Context) (bool, error) {
		return notFailed(ctx, tj)
	})
}

// A job created suspended never fails while suspended, and its window starts
// at its first resume.
func TestCreatedSuspendedJobStartsAtFirstResume(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "created-suspended", rt.Name, ptr.To[int64](2))
	tj.Spec.Suspend = ptr.To(true)
	create(t, tj)
	setCondition(t, tj, api.TrainJobSuspended, metav1.ConditionTrue, api.ReasonSuspended)

	consistently(t, "suspended TrainJob not Failed, 3x its deadline", 6*time.Second, func(ctx context.Context) (bool, error) {
		return notFailed(ctx, tj)
	})

	setCondition(t, tj, api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed)
	setSuspend(t, tj, false)
	eventually(t, "Failed=True reason DeadlineExceeded after the resume", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	assertFailedAfterResume(t, tj, 2*time.Second)
}

// A running job suspended and resumed gets its full window again from the
// resume.
func TestSuspendThenResumeResetsWindow(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "suspend-resume", rt.Name, ptr.To[int64](4))
	create(t, tj)
	created := tj.CreationTimestamp.Time

	sleepUntil(created.Add(2 * time.Second))
	setSuspend(t, tj, true)
	setCondition(t, tj, api.TrainJobSuspended, metav1.ConditionTrue, api.ReasonSuspended)
	if ok, err := notFailed(context.Background(), tj); err != nil || !ok {
		t.Fatalf("TrainJob Failed before it was suspended (err %v); the machine is too slow for a 4s deadline", err)
	}

	// Past the original deadline while suspended: still not Failed.
	sleepUntil(created.Add(6 * time.Second))
	consistently(t, "suspended TrainJob not Failed past its original deadline", 2*time.Second, func(ctx context.Context) (bool, error) {
		return notFailed(ctx, tj)
	})

	setCondition(t, tj, api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed)
	setSuspend(t, tj, false)
	eventually(t, "Failed=True reason DeadlineExceeded after the resume", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	assertFailedAfterResume(t, tj, 4*time.Second)
}

// assertFailedAfterResume checks, from the conditions' own timestamps, that
// the job failed no earlier than a full window after its resume.
func assertFailedAfterResume(t *testing.T, tj *trainerv1alpha1.TrainJob, window time.Duration) {
	t.Helper()
	got, err := getJob(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	resumed := meta.FindStatusCondition(got.Status.Conditions, api.TrainJobSuspended)
	failed := meta.FindStatusCondition(got.Status.Conditions, api.TrainJobFailed)
	if resumed == nil || resumed.Reason != api.ReasonResumed {
		t.Fatalf("Suspended condition = %+v, want reason Resumed", resumed)
	}
	if d := failed.LastTransitionTime.Sub(resumed.LastTransitionTime.Time); d < window {
		t.Errorf("Failed %v after the resume, before the full %v window", d, window)
	}
}

// shepherd stopped before a deadline and started again after it: the new
// instance, with no memory of the old, fails the job at once.
func TestRestartMidDeadlineStillEnforces(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	stop := startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "restart", rt.Name, ptr.To[int64](4))
	create(t, tj)
	js := createJobSet(t, tj)

	sleepUntil(tj.CreationTimestamp.Add(time.Second))
	stop()
	sleepUntil(tj.CreationTimestamp.Add(5 * time.Second))
	if ok, err := notFailed(context.Background(), tj); err != nil || !ok {
		t.Fatalf("TrainJob Failed while shepherd was stopped (err %v)", err)
	}

	startShepherd(t, ns)
	eventually(t, "Failed=True reason DeadlineExceeded after the restart", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	eventually(t, "the JobSet deleted after the restart", gone(js))
}

// shepherd stopped and restarted before the deadline: the new instance
// requeues at the deadline it recomputes.
func TestRestartBeforeDeadlineEnforcesOnTime(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	stop := startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "restart-early", rt.Name, ptr.To[int64](5))
	create(t, tj)
	sleepUntil(tj.CreationTimestamp.Add(time.Second))
	stop()
	startShepherd(t, ns)
	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	c, err := failedCondition(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	if early := c.LastTransitionTime.Sub(tj.CreationTimestamp.Time); early < 5*time.Second {
		t.Errorf("Failed %v after creation, before the 5s deadline", early)
	}
}

// A JobSet that appears after its TrainJob already failed by the deadline
// (Trainer lagging behind) is deleted too: shepherd watches JobSets.
func TestJobSetCreatedAfterDeadlineIsDeleted(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "late-jobset", rt.Name, ptr.To[int64](1))
	create(t, tj)
	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	js := createJobSet(t, tj)
	eventually(t, "the late JobSet deleted", gone(js))
}

// A JobSet of the same name controlled by something else is not shepherd's
// to delete.
func TestDeadlineLeavesForeignJobSet(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "foreign-jobset", rt.Name, ptr.To[int64](1))
	create(t, tj)
	// Owned by another (nonexistent) controller from the start.
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: tj.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "example.com/v1", Kind: "Other", Name: "x",
				UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true),
			}},
		},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Template: jobTemplate()}}},
	}
	create(t, js)
	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	consistently(t, "the foreign JobSet kept", 3*time.Second, exists(js))
}
