package trainjob

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

func TestRecordPart(t *testing.T) {
	at := func(n int) *metav1.Time { m := metav1.NewTime(t0.Add(time.Duration(n) * time.Second)); return &m }
	cases := []struct {
		name     string
		job      *trainerv1alpha1.TrainJob
		ttl      *RuntimeTTL
		expires  time.Time
		enforces bool
		want     shepherdv1alpha1.WorkloadRecordStatus
	}{
		{
			name: "running, no limits",
			job:  job(),
			want: shepherdv1alpha1.WorkloadRecordStatus{Phase: shepherdv1alpha1.PhaseRunning},
		},
		{
			name:     "running with a deadline shepherd enforces and a TTL not yet due",
			job:      job(deadline(60)),
			ttl:      &RuntimeTTL{Seconds: 30},
			enforces: true,
			want: shepherdv1alpha1.WorkloadRecordStatus{
				Phase:    shepherdv1alpha1.PhaseRunning,
				Deadline: &shepherdv1alpha1.Limit{Seconds: 60, DueTime: at(60), EnforcedBy: shepherdv1alpha1.EnforcerShepherd},
				TTL:      &shepherdv1alpha1.Limit{Seconds: 30, EnforcedBy: shepherdv1alpha1.EnforcerShepherd},
			},
		},
		{
			name: "the deadline counts from the last resume; Trainer enforces it",
			job:  job(deadline(60), cond(api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed, t0.Add(100*time.Second))),
			want: shepherdv1alpha1.WorkloadRecordStatus{
				Phase:    shepherdv1alpha1.PhaseRunning,
				Deadline: &shepherdv1alpha1.Limit{Seconds: 60, DueTime: at(160), EnforcedBy: shepherdv1alpha1.EnforcerTrainer},
			},
		},
		{
			name: "suspended: no deadline clock",
			job:  job(deadline(60), suspend(true)),
			want: shepherdv1alpha1.WorkloadRecordStatus{
				Phase: shepherdv1alpha1.PhaseSuspended, Reason: api.ReasonSuspended,
				Deadline: &shepherdv1alpha1.Limit{Seconds: 60, EnforcedBy: shepherdv1alpha1.EnforcerTrainer},
			},
		},
		{
			name:    "complete: Succeeded, the TTL due",
			job:     job(cond(api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted", t0.Add(10*time.Second))),
			ttl:     &RuntimeTTL{Seconds: 30},
			expires: t0.Add(40 * time.Second),
			want: shepherdv1alpha1.WorkloadRecordStatus{
				Phase: shepherdv1alpha1.PhaseSucceeded, Reason: "JobsCompleted",
				TTL: &shepherdv1alpha1.Limit{Seconds: 30, DueTime: at(40), EnforcedBy: shepherdv1alpha1.EnforcerShepherd},
			},
		},
		{
			name: "failed by its deadline: the deadline no longer runs",
			job: func() *trainerv1alpha1.TrainJob {
				tj := job(deadline(60), cond(api.TrainJobFailed, metav1.ConditionTrue, api.ReasonDeadlineExceeded, t0.Add(60*time.Second)))
				tj.Status.Conditions[0].Message = api.MessageDeadlineExceeded
				return tj
			}(),
			enforces: true,
			want: shepherdv1alpha1.WorkloadRecordStatus{
				Phase: shepherdv1alpha1.PhaseFailed, Reason: api.ReasonDeadlineExceeded, Message: api.MessageDeadlineExceeded,
				Deadline: &shepherdv1alpha1.Limit{Seconds: 60, EnforcedBy: shepherdv1alpha1.EnforcerShepherd},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := RecordPart(tc.job, tc.ttl, tc.expires, tc.enforces)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RecordPart (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSamePartIgnoresSubSecond(t *testing.T) {
	due := metav1.NewTime(t0.Add(1500 * time.Millisecond))
	stored := metav1.NewTime(t0.Add(time.Second))
	part := shepherdv1alpha1.WorkloadRecordStatus{Phase: shepherdv1alpha1.PhaseRunning,
		Deadline: &shepherdv1alpha1.Limit{Seconds: 1, DueTime: &due, EnforcedBy: shepherdv1alpha1.EnforcerShepherd}}
	rec := &shepherdv1alpha1.WorkloadRecord{Status: shepherdv1alpha1.WorkloadRecordStatus{Phase: shepherdv1alpha1.PhaseRunning,
		Deadline: &shepherdv1alpha1.Limit{Seconds: 1, DueTime: &stored, EnforcedBy: shepherdv1alpha1.EnforcerShepherd},
		// Another manager's part does not count.
		Conditions: []metav1.Condition{{Type: api.TrainJobWorkloadReady}}}}
	if !samePart(rec, part) {
		t.Error("a due time stored to the second differs from the same time with milliseconds: every reconcile would write again")
	}
	part.Phase = shepherdv1alpha1.PhaseSucceeded
	if samePart(rec, part) {
		t.Error("a changed phase is not seen")
	}
	if samePart(nil, part) {
		t.Error("no record is the same as a part")
	}
}
