package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/reconcile/trainjob"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

func TestTTLFromClusterTrainingRuntimeDeletesFinishedJob(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, ptr.To[int32](2))
	tj := newTrainJob(ns, "ttl-cluster", rt.Name, nil)
	create(t, tj)
	consistently(t, "unfinished TrainJob kept", 3*time.Second, exists(tj))
	setCondition(t, tj, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	eventually(t, "the finished TrainJob deleted", gone(tj))
}

func TestTTLFromNamespacedTrainingRuntimeDeletesFinishedJob(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	// A ClusterTrainingRuntime of the same name without a TTL: the job must
	// resolve the namespaced kind it names.
	ctr := createClusterRuntime(t, nil)
	m, spec := newRuntime(ptr.To[int32](1), carrierTTL)
	m.Namespace, m.Name = ns, ctr.Name
	rt := &trainerv1alpha1.TrainingRuntime{ObjectMeta: m, Spec: spec}
	create(t, rt)
	tj := newTrainJob(ns, "ttl-namespaced", rt.Name, nil)
	tj.Spec.RuntimeRef.Kind = ptr.To(api.KindTrainingRuntime)
	create(t, tj)
	setCondition(t, tj, api.TrainJobFailed, metav1.ConditionTrue, "JobsFailed")
	eventually(t, "the finished TrainJob deleted", gone(tj))
}

func TestTTLZeroDeletesAtOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, ptr.To[int32](0))
	tj := newTrainJob(ns, "ttl-zero", rt.Name, nil)
	create(t, tj)
	setCondition(t, tj, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	eventually(t, "the finished TrainJob deleted", gone(tj))
	if v := metricValue(t, "shepherd_trainjob_ttl_deletions_total"); v < 1 {
		t.Errorf("shepherd_trainjob_ttl_deletions_total = %v, want >= 1", v)
	}
}

// A job failed by its deadline is finished: a TTL of 0 deletes it next.
func TestDeadlineThenTTLZero(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, ptr.To[int32](0))
	tj := newTrainJob(ns, "deadline-ttl", rt.Name, ptr.To[int64](1))
	create(t, tj)
	eventually(t, "the TrainJob failed by its deadline and deleted", gone(tj))
}

// Without a TTL a finished job stays; a TTL added to its runtime later
// applies (the controller watches runtimes).
func TestNoTTLKeepsJobUntilRuntimeGetsOne(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "no-ttl", rt.Name, nil)
	create(t, tj)
	setCondition(t, tj, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	consistently(t, "finished TrainJob without a TTL kept", 4*time.Second, exists(tj))

	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"0"}}}`, trainer.RuntimeTTL.Annotation))
	if err := env.Client.Patch(context.Background(), rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("adding a TTL to the runtime: %v", err)
	}
	eventually(t, "the finished TrainJob deleted once its runtime has a TTL", gone(tj))
}

// A TrainJob deleted and recreated under the same name is not deleted by a
// TTL decision made on the old one: the delete carries the old UID as a
// precondition, which the apiserver refuses.
func TestRecreatedJobNotDeletedByOldTTL(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, ptr.To[int32](0))
	ctx := context.Background()

	old := newTrainJob(ns, "recreated", rt.Name, nil)
	create(t, old)
	stale := old.DeepCopy()
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatalf("deleting the first TrainJob: %v", err)
	}
	eventually(t, "the first TrainJob gone", gone(old.DeepCopy()))
	fresh := newTrainJob(ns, "recreated", rt.Name, nil)
	create(t, fresh)
	if fresh.UID == stale.UID {
		t.Fatalf("recreated TrainJob has the old UID %s", stale.UID)
	}

	// The old incarnation, as a TTL decision would have seen it: finished
	// long ago under a TTL of 0.
	stale.Status.Conditions = []metav1.Condition{{Type: api.TrainJobComplete, Status: metav1.ConditionTrue,
		Reason: "JobsCompleted", LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
	deleted, err := trainjob.DeleteTrainJob(ctx, env.Client, stale)
	if err != nil {
		t.Fatalf("DeleteTrainJob(old incarnation): %v", err)
	}
	if deleted {
		t.Errorf("DeleteTrainJob(old incarnation) reports a deletion")
	}
	consistently(t, "the recreated, unfinished TrainJob kept", 3*time.Second, func(ctx context.Context) (bool, error) {
		got, err := getJob(ctx, fresh)
		if err != nil {
			return false, err
		}
		return got.UID == fresh.UID, nil
	})

	// The new incarnation has its own timers.
	setCondition(t, fresh, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	eventually(t, "the recreated TrainJob deleted after it finished", gone(fresh))
}

// The runtime's TTL in both its forms — the carrier annotation on
// Trainer's runtime CRD (which has no such field) and the seed field on the
// seed-shaped CRD — deletes a finished TrainJob on time: not before its
// Complete condition's lastTransitionTime + TTL, soon after, and with the
// job's UID as the delete's precondition.
func TestTTLDeletesOnTimeWithUIDPrecondition(t *testing.T) {
	t.Parallel()
	const ttl = 3
	for _, tc := range []struct {
		form ttlForm
		crds cluster.CRDSet
	}{
		{form: carrierTTL, crds: cluster.UpstreamCRDs},
		{form: fieldTTL, crds: cluster.SeedCRDs},
	} {
		t.Run(tc.form.String(), func(t *testing.T) {
			t.Parallel()
			c := env
			if tc.crds != cluster.UpstreamCRDs {
				c = cluster.Start(t, cluster.Options{CRDs: tc.crds})
			}
			ns := c.Namespace(t)
			w := &writes{}
			startShepherdWith(t, ns, shepherdOptions{cluster: c, writes: w})
			rt := createClusterRuntimeOn(t, c.Client, ptr.To[int32](ttl), tc.form)
			tj := newTrainJob(ns, "ttl-on-time", rt.Name, nil)
			createOn(t, c.Client, tj)
			deleted := watchDeletion(t, c, tj)

			setConditionOn(t, c.Client, tj, metav1.Condition{Type: api.TrainJobComplete, Status: metav1.ConditionTrue,
				Reason: "JobsCompleted", Message: "set by the test, playing Trainer"})
			finished := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobComplete).LastTransitionTime.Time
			var at time.Time
			select {
			case at = <-deleted:
			case <-time.After(timeout):
				t.Fatalf("the finished TrainJob was not deleted within %v", timeout)
			}
			// lastTransitionTime has whole seconds, at or before the write:
			// the deletion may not come before it + TTL by shepherd's
			// clock, which is this process's.
			if d := at.Sub(finished); d < ttl*time.Second {
				t.Errorf("deleted %v after it finished, before its TTL of %ds", d, ttl)
			} else if d > ttl*time.Second+15*time.Second {
				t.Errorf("deleted %v after it finished, long after its TTL of %ds", d, ttl)
			}
			// The watch may see the deletion before shepherd's Delete call
			// has returned and been recorded.
			var ok []deleteCall
			eventually(t, "shepherd's TrainJob delete recorded", func(context.Context) (bool, error) {
				ok = ok[:0]
				for _, d := range w.deletesOf(api.KindTrainJob) {
					if d.err == nil {
						ok = append(ok, d)
					}
				}
				return len(ok) > 0, nil
			})
			if len(ok) != 1 || ok[0].name != tj.Name || ok[0].preconditionUID != string(tj.UID) {
				t.Errorf("shepherd's successful TrainJob deletes = %+v, want one of %s with UID precondition %s", ok, tj.Name, tj.UID)
			}
		})
	}
}

// watchDeletion reports when a watch sees tj deleted.
func watchDeletion(t *testing.T, c *cluster.Cluster, tj *trainerv1alpha1.TrainJob) <-chan time.Time {
	t.Helper()
	w := watchTrainJob(t, c.Config, tj)
	out := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}

// A carrier that does not parse (stored before shepherd's admission rules
// ran: this suite runs no webhook) is no TTL: finished jobs are kept, and
// the runtime gets one Warning Event however many of its jobs are
// reconciled. Fixing the carrier brings the jobs back and applies it.
func TestMalformedTTLCarrierKeepsJobsAndWarnsOnce(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	ctx := context.Background()
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"1h"}}}`, trainer.RuntimeTTL.Annotation))
	if err := env.Client.Patch(ctx, rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("setting a malformed TTL carrier: %v", err)
	}
	jobs := []*trainerv1alpha1.TrainJob{newTrainJob(ns, "bad-ttl-a", rt.Name, nil), newTrainJob(ns, "bad-ttl-b", rt.Name, nil)}
	for _, tj := range jobs {
		create(t, tj)
		setCondition(t, tj, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	}
	invalidKnobEvents := func(ctx context.Context) ([]eventsv1.Event, error) {
		var evs eventsv1.EventList
		// A cluster-scoped object's Events live in namespace default.
		if err := env.Client.List(ctx, &evs, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return nil, err
		}
		var out []eventsv1.Event
		for _, e := range evs.Items {
			if e.Regarding.Kind == api.KindClusterTrainingRuntime && e.Regarding.Name == rt.Name && e.Reason == api.EventInvalidKnob {
				out = append(out, e)
			}
		}
		return out, nil
	}
	eventually(t, "an InvalidKnob Warning Event on the runtime", func(ctx context.Context) (bool, error) {
		evs, err := invalidKnobEvents(ctx)
		return len(evs) > 0, err
	})
	for _, tj := range jobs {
		consistently(t, "a finished TrainJob whose runtime's TTL does not parse kept", 2*time.Second, exists(tj))
	}
	evs, err := invalidKnobEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != "Warning" || (evs[0].Series != nil && evs[0].Series.Count > 1) {
		t.Errorf("InvalidKnob Events on the runtime = %+v, want one Warning, recorded once", evs)
	}

	patch = []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"0"}}}`, trainer.RuntimeTTL.Annotation))
	if err := env.Client.Patch(ctx, rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("fixing the TTL carrier: %v", err)
	}
	for _, tj := range jobs {
		eventually(t, "the finished TrainJob deleted once its runtime's TTL parses", gone(tj))
	}
}

// Issue 19, defect 9c: a TTL added to a runtime does not delete every old
// finished TrainJob at once (KEP-2899: no retro-applied defaults); for a
// job that finished before, it counts from when it was set — read from the
// runtime's managedFields, so a shepherd restarted in between keeps the
// same expiry.
func TestTTLAddedLaterCountsFromWhenItWasSet(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	stop := startShepherd(t, ns)
	rt := createClusterRuntime(t, nil)
	tj := newTrainJob(ns, "ttl-added-later", rt.Name, nil)
	create(t, tj)
	setCondition(t, tj, api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted")
	// Finished 4 s before the TTL of 3 s appears: counted from the finish
	// it would already have expired.
	time.Sleep(4 * time.Second)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"3"}}}`, trainer.RuntimeTTL.Annotation))
	if err := env.Client.Patch(context.Background(), rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("adding a TTL to the runtime: %v", err)
	}
	// shepherd restarts right after: the expiry is derived again from the
	// objects, not remembered.
	stop()
	startShepherd(t, ns)
	consistently(t, "the old finished TrainJob kept right after its runtime got a TTL", 1500*time.Millisecond, exists(tj))
	eventually(t, "the TrainJob deleted once the TTL passed from when it was set", gone(tj))
}
