package trainjob

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	jobsetv1alpha2 "github.com/shepherd-k8s/shepherd/api/jobset/v1alpha2"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
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

// trainerDeadlineMessage is the message Trainer v2.3.0 writes on the Failed
// condition (pkg/constants.TrainJobDeadlineExceededMessage).
const trainerDeadlineMessage = "TrainJob exceeded its active deadline"

// deadlineEnforcement is the Enforcement `shepherd serve` would hold for
// this apiserver with the deadline setting mode: the upstream decision
// comes from the TrainJob schema the apiserver serves (Trainer v2.3.0's,
// which has spec.activeDeadlineSeconds).
func deadlineEnforcement(t *testing.T, mode integrations.Mode) *integrations.Enforcement {
	t.Helper()
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := env.Client.List(context.Background(), &list); err != nil {
		t.Fatalf("listing CRDs: %v", err)
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(list.Items))
	for i := range list.Items {
		crds = append(crds, &list.Items[i])
	}
	served, err := celrules.NewSchemas(crds, "the test apiserver")
	if err != nil {
		t.Fatal(err)
	}
	upstream, why := trainer.EnforcesDeadline(served)
	if !upstream {
		t.Fatalf("EnforcesDeadline(served schemas) = false (%s), want true on Trainer v2.3.0's CRD", why)
	}
	e := integrations.NewEnforcement(logr.Discard(), map[integrations.Feature]integrations.Mode{integrations.FeatureDeadline: mode})
	e.SetUpstream(integrations.FeatureDeadline, upstream, why)
	return e
}

// watchFailed records every distinct Failed=True condition a watch sees on
// tj: one entry per write of the condition (a rewrite changes its reason,
// message or lastTransitionTime).
func watchFailed(t *testing.T, tj *trainerv1alpha1.TrainJob) func() []metav1.Condition {
	t.Helper()
	w := watchTrainJob(t, env.Config, tj)
	var mu sync.Mutex
	var seen []metav1.Condition
	go func() {
		for ev := range w.ResultChan() {
			got, ok := ev.Object.(*trainerv1alpha1.TrainJob)
			if !ok {
				continue
			}
			c := meta.FindStatusCondition(got.Status.Conditions, api.TrainJobFailed)
			if c == nil || c.Status != metav1.ConditionTrue {
				continue
			}
			mu.Lock()
			if n := len(seen); n == 0 || seen[n-1].Reason != c.Reason || seen[n-1].Message != c.Message ||
				!seen[n-1].LastTransitionTime.Equal(&c.LastTransitionTime) {
				seen = append(seen, *c)
			}
			mu.Unlock()
		}
	}()
	return func() []metav1.Condition {
		mu.Lock()
		defer mu.Unlock()
		return append([]metav1.Condition(nil), seen...)
	}
}

// deadlineEvents lists the DeadlineExceeded Events on tj.
func deadlineEvents(ctx context.Context, tj *trainerv1alpha1.TrainJob) ([]eventsv1.Event, error) {
	var evs eventsv1.EventList
	if err := env.Client.List(ctx, &evs, client.InNamespace(tj.Namespace)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Kind == api.KindTrainJob && e.Regarding.Name == tj.Name && e.Reason == api.EventDeadlineExceeded {
			out = append(out, e)
		}
	}
	return out, nil
}

// Trainer v2.3.0 enforces activeDeadlineSeconds itself; with the deadline
// setting auto and its schema served, shepherd stands down: the test plays
// Trainer (Failed=True DeadlineExceeded with Trainer's message, JobSet
// deleted) and shepherd writes no condition, records no Event and deletes
// no JobSet — not even a second JobSet of the same name created after
// Trainer's delete, which shepherd's own cleanup would remove. The TTL
// stays shepherd's: Trainer has none.
func TestDeadlineStandsDownWhereTrainerEnforcesIt(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	enf := deadlineEnforcement(t, integrations.ModeAuto)
	if enf.Enforces(integrations.FeatureDeadline) {
		t.Fatalf("Enforcement in auto with Trainer's schema served enforces the deadline: %v", enf.Status())
	}
	w := &writes{}
	startShepherdWith(t, ns, shepherdOptions{enforcement: enf, writes: w})
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "trainer-enforces", rt.Name, ptr.To[int64](2))
	create(t, tj)
	failed := watchFailed(t, tj)
	js := createJobSet(t, tj)

	// Well past the deadline, shepherd's requeue at it included: nothing.
	sleepUntil(tj.CreationTimestamp.Add(5 * time.Second))
	if ok, err := notFailed(context.Background(), tj); err != nil || !ok {
		t.Fatalf("TrainJob Failed with shepherd standing down and Trainer not yet acting (err %v)", err)
	}
	if ok, err := exists(js)(context.Background()); err != nil || !ok {
		t.Fatalf("JobSet gone with shepherd standing down and Trainer not yet acting (err %v)", err)
	}

	// Trainer's reconcileDeadline: the Failed condition, then a plain
	// delete of the JobSet named like the job.
	setConditionOn(t, env.Client, tj, metav1.Condition{Type: api.TrainJobFailed, Status: metav1.ConditionTrue,
		Reason: api.ReasonDeadlineExceeded, Message: trainerDeadlineMessage})
	if err := env.Client.Delete(context.Background(), js); err != nil {
		t.Fatalf("deleting the JobSet as Trainer: %v", err)
	}
	eventually(t, "Trainer's JobSet delete", gone(js.DeepCopy()))
	second := createJobSet(t, tj)
	consistently(t, "a second JobSet of the failed job kept", 3*time.Second, exists(second))

	if got := failed(); len(got) != 1 || got[0].Message != trainerDeadlineMessage {
		t.Errorf("Failed=True writes seen = %+v, want exactly Trainer's one", got)
	}
	if d := w.deletesOf(api.KindJobSet); len(d) != 0 {
		t.Errorf("shepherd's JobSet deletes = %+v, want none", d)
	}
	if n := w.statusPatchCount(); n != 0 {
		t.Errorf("shepherd patched the TrainJob's status %d times, want never", n)
	}
	// Trainer v2.3.0 records no Event for the deadline: any is shepherd's.
	if evs, err := deadlineEvents(context.Background(), tj); err != nil || len(evs) != 0 {
		t.Errorf("DeadlineExceeded Events = %+v (err %v), want none from shepherd", evs, err)
	}

	// The TTL is still shepherd's: a TTL of 0 deletes the failed job.
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"0"}}}`, trainer.RuntimeTTL.Annotation))
	if err := env.Client.Patch(context.Background(), rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("adding a TTL to the runtime: %v", err)
	}
	eventually(t, "the job Trainer failed deleted by shepherd's TTL", gone(tj))
}

// With the deadline setting on, shepherd enforces the deadline although
// Trainer's schema is served: one Failed transition, one Event, one JobSet
// delete.
func TestDeadlineSettingOnEnforcesDespiteTrainer(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	enf := deadlineEnforcement(t, integrations.ModeOn)
	if !enf.Enforces(integrations.FeatureDeadline) {
		t.Fatalf("Enforcement with the deadline setting on does not enforce it: %v", enf.Status())
	}
	w := &writes{}
	startShepherdWith(t, ns, shepherdOptions{enforcement: enf, writes: w})
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "setting-on", rt.Name, ptr.To[int64](2))
	create(t, tj)
	failed := watchFailed(t, tj)
	js := createJobSet(t, tj)

	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	eventually(t, "the JobSet deleted", gone(js.DeepCopy()))
	eventually(t, "shepherd's DeadlineExceeded Event", func(ctx context.Context) (bool, error) {
		evs, err := deadlineEvents(ctx, tj)
		return len(evs) > 0, err
	})
	// Let any second action show itself.
	consistently(t, "the job failed by its deadline", 3*time.Second, func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})

	if got := failed(); len(got) != 1 || got[0].Message != api.MessageDeadlineExceeded {
		t.Errorf("Failed=True writes seen = %+v, want exactly shepherd's one", got)
	}
	if n := w.statusPatchCount(); n != 1 {
		t.Errorf("shepherd patched the TrainJob's status %d times, want once", n)
	}
	var deleted []deleteCall
	for _, d := range w.deletesOf(api.KindJobSet) {
		if d.err == nil {
			deleted = append(deleted, d)
		}
	}
	if len(deleted) != 1 || deleted[0].preconditionUID != string(js.UID) {
		t.Errorf("shepherd's successful JobSet deletes = %+v, want one with UID precondition %s", deleted, js.UID)
	}
	evs, err := deadlineEvents(context.Background(), tj)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != "Warning" || (evs[0].Series != nil && evs[0].Series.Count > 1) {
		t.Errorf("DeadlineExceeded Events = %+v, want one Warning, recorded once", evs)
	}
}

// TestDeadlineLeavesStandaloneJobSet: a JobSet that merely bears the
// TrainJob's name, with no controller, is not the TrainJob's to delete.
func TestDeadlineLeavesStandaloneJobSet(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "standalone-jobset", rt.Name, ptr.To[int64](1))
	create(t, tj)
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tj.Name},
		Spec:       jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Template: jobTemplate()}}},
	}
	create(t, js)
	eventually(t, "Failed=True reason DeadlineExceeded", func(ctx context.Context) (bool, error) {
		return isDeadlineFailed(ctx, tj)
	})
	consistently(t, "the standalone JobSet kept", 3*time.Second, exists(js))
}
