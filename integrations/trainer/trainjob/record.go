package trainjob

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// RecordManager is the field manager of this controller's part of a
// TrainJob's WorkloadRecord: the phase, the deadline and the TTL. The
// Workload controller owns the PodGroups part under its own manager.
const RecordManager = "shepherd-trainjob-lifecycle"

// RecordPart is this controller's part of tj's WorkloadRecord status: the
// job's phase as its conditions say (Trainer's, or shepherd's
// DeadlineExceeded), its deadline — when it falls and who enforces it
// (enforces: shepherd; else Trainer) — and its TTL — when shepherd deletes
// it. A due time is set only while its clock runs: the deadline's while the
// job runs, the TTL's once it finished. ttl is the runtime's TTL (nil:
// none); expires is DecideTTL's expiry (zero: not finished).
func RecordPart(tj *trainerv1alpha1.TrainJob, ttl *RuntimeTTL, expires time.Time, enforces bool) shepherdv1alpha1.WorkloadRecordStatus {
	var st shepherdv1alpha1.WorkloadRecordStatus
	switch {
	case isTrue(tj, api.TrainJobFailed):
		st.Phase = shepherdv1alpha1.PhaseFailed
		c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
		st.Reason, st.Message = c.Reason, c.Message
	case isTrue(tj, api.TrainJobComplete):
		st.Phase = shepherdv1alpha1.PhaseSucceeded
		c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobComplete)
		st.Reason, st.Message = c.Reason, c.Message
	case Suspended(tj):
		st.Phase, st.Reason = shepherdv1alpha1.PhaseSuspended, api.ReasonSuspended
	default:
		st.Phase = shepherdv1alpha1.PhaseRunning
	}
	if s := tj.Spec.ActiveDeadlineSeconds; s != nil {
		st.Deadline = &shepherdv1alpha1.Limit{Seconds: *s, EnforcedBy: shepherdv1alpha1.EnforcerTrainer}
		if enforces {
			st.Deadline.EnforcedBy = shepherdv1alpha1.EnforcerShepherd
		}
		if st.Phase == shepherdv1alpha1.PhaseRunning {
			due := metav1.NewTime(StartTime(tj).Add(time.Duration(*s) * time.Second))
			st.Deadline.DueTime = &due
		}
	}
	if ttl != nil {
		st.TTL = &shepherdv1alpha1.Limit{Seconds: int64(ttl.Seconds), EnforcedBy: shepherdv1alpha1.EnforcerShepherd}
		if !expires.IsZero() {
			due := metav1.NewTime(expires)
			st.TTL.DueTime = &due
		}
	}
	return st
}

// samePart reports whether rec already says what part says, in the fields
// this controller owns (timestamps to the second, as stored).
func samePart(rec *shepherdv1alpha1.WorkloadRecord, part shepherdv1alpha1.WorkloadRecordStatus) bool {
	if rec == nil {
		return false
	}
	have := shepherdv1alpha1.WorkloadRecordStatus{Phase: rec.Status.Phase, Reason: rec.Status.Reason, Message: rec.Status.Message,
		Deadline: rec.Status.Deadline, TTL: rec.Status.TTL}
	return equality.Semantic.DeepEqual(truncate(have), truncate(part))
}

func truncate(st shepherdv1alpha1.WorkloadRecordStatus) shepherdv1alpha1.WorkloadRecordStatus {
	out := *st.DeepCopy()
	for _, l := range []*shepherdv1alpha1.Limit{out.Deadline, out.TTL} {
		if l != nil && l.DueTime != nil {
			t := metav1.NewTime(l.DueTime.Truncate(time.Second))
			l.DueTime = &t
		}
	}
	return out
}

// writeRecord applies part to tj's record unless the record says it
// already: one write when the job's phase, deadline or TTL changes, none
// otherwise.
func (r *Reconciler) writeRecord(ctx context.Context, tj *trainerv1alpha1.TrainJob, part shepherdv1alpha1.WorkloadRecordStatus) error {
	rec, err := record.Get(ctx, r.Client, api.KindTrainJob, tj)
	if err != nil {
		return err
	}
	if samePart(rec, part) {
		return nil
	}
	want := record.For(tj, trainerv1alpha1.GroupVersion.WithKind(api.KindTrainJob))
	want.Status = part
	return record.Apply(ctx, r.Client, want, RecordManager)
}
