package trainjob

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/trainjob"
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
	rt := &trainerv1alpha1.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ctr.Name},
		Spec:       newRuntimeSpec(ptr.To[int32](1)),
	}
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

	patch := []byte(`{"spec":{"ttlSecondsAfterFinished":0}}`)
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
