package trainjob

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// t0 is every test job's creationTimestamp.
var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

type jobOpt func(*trainerv1alpha1.TrainJob)

// job is ns/j, created at t0, changed by opts.
func job(opts ...jobOpt) *trainerv1alpha1.TrainJob {
	tj := testkit.Into[trainerv1alpha1.TrainJob](testkit.TrainJob("ns", "j", "torch", 0).UID("uid-1"))
	tj.CreationTimestamp = metav1.NewTime(t0)
	for _, o := range opts {
		o(tj)
	}
	return tj
}

func deadline(s int64) jobOpt {
	return func(tj *trainerv1alpha1.TrainJob) { tj.Spec.ActiveDeadlineSeconds = ptr.To(s) }
}

func suspend(b bool) jobOpt {
	return func(tj *trainerv1alpha1.TrainJob) { tj.Spec.Suspend = ptr.To(b) }
}

func cond(typ string, status metav1.ConditionStatus, reason string, at time.Time) jobOpt {
	return func(tj *trainerv1alpha1.TrainJob) {
		tj.Status.Conditions = append(tj.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at),
		})
	}
}

func TestDecideDeadline(t *testing.T) {
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	cases := []struct {
		name string
		job  *trainerv1alpha1.TrainJob
		now  time.Time
		// upstream: Trainer enforces deadlines, shepherd stands down.
		upstream bool
		want     DeadlineDecision
	}{
		{
			name: "no deadline set: no enforcement",
			job:  job(),
			now:  sec(1_000_000),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "deadline not reached: requeue at the deadline",
			job:  job(deadline(60)),
			now:  sec(15),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: sec(60), RequeueAfter: 45 * time.Second},
		},
		{
			name: "deadline exceeded: fail with DeadlineExceeded",
			job:  job(deadline(60)),
			now:  sec(61),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "deadline exceeded by a nanosecond",
			job:  job(deadline(60)),
			now:  sec(60).Add(time.Nanosecond),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "deadline exactly now: not yet exceeded, requeue after 1s (no zero requeue)",
			job:  job(deadline(60)),
			now:  sec(60),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: sec(60), RequeueAfter: time.Second},
		},
		{
			name: "deadline expired during downtime: act at once",
			job:  job(deadline(60)),
			now:  sec(86_400),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "resumed at t: the window runs from t, not from creation",
			job:  job(deadline(60), suspend(false), cond(api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed, sec(100))),
			now:  sec(130),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: sec(160), RequeueAfter: 30 * time.Second},
		},
		{
			name: "resumed at t: exceeded once t + deadline passed",
			job:  job(deadline(60), suspend(false), cond(api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed, sec(100))),
			now:  sec(161),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(160)},
		},
		{
			name: "Suspended=False with a reason other than Resumed does not move the start",
			job:  job(deadline(60), cond(api.TrainJobSuspended, metav1.ConditionFalse, "NotSuspended", sec(100))),
			now:  sec(61),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "created suspended: timer does not run however long it waits",
			job:  job(deadline(60), suspend(true), cond(api.TrainJobSuspended, metav1.ConditionTrue, api.ReasonSuspended, sec(0))),
			now:  sec(10_000),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "created suspended, first resumed at t: window from t",
			job:  job(deadline(60), suspend(false), cond(api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed, sec(10_000))),
			now:  sec(10_030),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: sec(10_060), RequeueAfter: 30 * time.Second},
		},
		{
			// Issue 19, defect 9b, decided: Trainer v2.3.0's rule.
			name: "defect 9b: created suspended, resumed, no resume recorded (no Suspended condition): from creation, as Trainer v2.3.0",
			job:  job(deadline(60), suspend(false)),
			now:  sec(10_000),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "defect 9b: resumed, suspended again, resumed again: from the last resume",
			job:  job(deadline(60), suspend(false), cond(api.TrainJobSuspended, metav1.ConditionFalse, api.ReasonResumed, sec(20_000))),
			now:  sec(20_059),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: sec(20_060), RequeueAfter: time.Second},
		},
		{
			name: "spec.suspend set but Trainer has not reported Suspended yet: suspended",
			job:  job(deadline(60), suspend(true)),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "resume asked but Trainer still reports Suspended=True: still suspended",
			job:  job(deadline(60), suspend(false), cond(api.TrainJobSuspended, metav1.ConditionTrue, api.ReasonSuspended, sec(10))),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "finished (Complete) job untouched",
			job:  job(deadline(60), cond(api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted", sec(30))),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "finished (Failed for another reason) job untouched",
			job:  job(deadline(60), cond(api.TrainJobFailed, metav1.ConditionTrue, "JobsFailed", sec(30))),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineNone},
		},
		{
			name: "Complete=False does not count as finished",
			job:  job(deadline(60), cond(api.TrainJobComplete, metav1.ConditionFalse, "Running", sec(30))),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineExceed, Deadline: sec(60)},
		},
		{
			name: "huge activeDeadlineSeconds does not overflow into a passed deadline",
			job:  job(deadline(math.MaxInt64)),
			now:  sec(10),
			want: DeadlineDecision{Action: DeadlineWait, Deadline: t0.Add(maxDeadlineSeconds * time.Second), RequeueAfter: maxDeadlineSeconds*time.Second - 10*time.Second},
		},
		{
			name: "already failed by the deadline: make sure the JobSet is gone",
			job:  job(deadline(60), cond(api.TrainJobFailed, metav1.ConditionTrue, api.ReasonDeadlineExceeded, sec(61))),
			now:  sec(120),
			want: DeadlineDecision{Action: DeadlineCleanup},
		},
		// Trainer enforces the deadline (integrations.FeatureDeadline not
		// shepherd's): nothing written, emitted or deleted.
		{
			name:     "upstream enforces: deadline exceeded, shepherd stands down",
			job:      job(deadline(60)),
			now:      sec(61),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineUpstream, Deadline: sec(60)},
		},
		{
			name:     "upstream enforces: expired during downtime, shepherd still stands down",
			job:      job(deadline(60)),
			now:      sec(86_400),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineUpstream, Deadline: sec(60)},
		},
		{
			name:     "upstream enforces: failed by Trainer, no second JobSet delete",
			job:      job(deadline(60), cond(api.TrainJobFailed, metav1.ConditionTrue, api.ReasonDeadlineExceeded, sec(61))),
			now:      sec(120),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineUpstream},
		},
		{
			name:     "upstream enforces: deadline ahead, still requeued at it (the decision may move to shepherd)",
			job:      job(deadline(60)),
			now:      sec(15),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineWait, Deadline: sec(60), RequeueAfter: 45 * time.Second},
		},
		{
			name:     "upstream enforces: no deadline set",
			job:      job(),
			now:      sec(1_000_000),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineNone},
		},
		{
			name:     "upstream enforces: suspended job",
			job:      job(deadline(60), suspend(true)),
			now:      sec(120),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineNone},
		},
		{
			name:     "upstream enforces: finished job",
			job:      job(deadline(60), cond(api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted", sec(30))),
			now:      sec(120),
			upstream: true,
			want:     DeadlineDecision{Action: DeadlineNone},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideDeadline(tc.job, testingclock.NewFakePassiveClock(tc.now), !tc.upstream)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideDeadline (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideTTL(t *testing.T) {
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	complete := cond(api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted", sec(100))
	cases := []struct {
		name string
		job  *trainerv1alpha1.TrainJob
		ttl  *RuntimeTTL
		now  time.Time
		want TTLDecision
	}{
		{
			name: "TTL not set on the runtime: never deleted",
			job:  job(complete),
			now:  sec(1_000_000),
			want: TTLDecision{},
		},
		{
			name: "TTL from the runtime: deleted after expiry",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(161),
			want: TTLDecision{Delete: true, ExpiresAt: sec(160)},
		},
		{
			name: "TTL expiry exactly now: deleted",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(160),
			want: TTLDecision{Delete: true, ExpiresAt: sec(160)},
		},
		{
			name: "TTL in the future: requeue at expiry",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(110),
			want: TTLDecision{ExpiresAt: sec(160), RequeueAfter: 50 * time.Second},
		},
		{
			name: "TTL 0: deleted at once after completion",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 0},
			now:  sec(100),
			want: TTLDecision{Delete: true, ExpiresAt: sec(100)},
		},
		{
			name: "TTL expired during downtime: deleted at once",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(86_400),
			want: TTLDecision{Delete: true, ExpiresAt: sec(160)},
		},
		{
			name: "Failed counts as finished",
			job:  job(cond(api.TrainJobFailed, metav1.ConditionTrue, api.ReasonDeadlineExceeded, sec(200))),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(230),
			want: TTLDecision{ExpiresAt: sec(260), RequeueAfter: 30 * time.Second},
		},
		{
			name: "both Complete and Failed True: the earlier finish counts",
			job: job(complete,
				cond(api.TrainJobFailed, metav1.ConditionTrue, "JobsFailed", sec(500))),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(170),
			want: TTLDecision{Delete: true, ExpiresAt: sec(160)},
		},
		{
			name: "running job: TTL does not start",
			job:  job(cond(api.TrainJobComplete, metav1.ConditionFalse, "Running", sec(100))),
			ttl:  &RuntimeTTL{Seconds: 0},
			now:  sec(1_000_000),
			want: TTLDecision{},
		},
		{
			name: "suspended job that finished: TTL counts from the finish, not the suspension",
			job: job(suspend(true),
				cond(api.TrainJobSuspended, metav1.ConditionTrue, api.ReasonSuspended, sec(10)),
				complete),
			ttl:  &RuntimeTTL{Seconds: 60},
			now:  sec(100),
			want: TTLDecision{ExpiresAt: sec(160), RequeueAfter: 60 * time.Second},
		},
		// Issue 19, defect 9c: a TTL set after the job finished counts from
		// when it was set.
		{
			name: "defect 9c: TTL set on the runtime after the finish: counts from when it was set",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60, Since: sec(10_000)},
			now:  sec(10_030),
			want: TTLDecision{ExpiresAt: sec(10_060), RequeueAfter: 30 * time.Second},
		},
		{
			name: "defect 9c: TTL set after the finish, expired since it was set",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60, Since: sec(10_000)},
			now:  sec(10_060),
			want: TTLDecision{Delete: true, ExpiresAt: sec(10_060)},
		},
		{
			name: "defect 9c: TTL set before the finish: the finish counts",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 60, Since: sec(50)},
			now:  sec(161),
			want: TTLDecision{Delete: true, ExpiresAt: sec(160)},
		},
		{
			name: "defect 9c: TTL 0 added later deletes at once, from when it was set",
			job:  job(complete),
			ttl:  &RuntimeTTL{Seconds: 0, Since: sec(10_000)},
			now:  sec(10_000),
			want: TTLDecision{Delete: true, ExpiresAt: sec(10_000)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideTTL(tc.job, tc.ttl, testingclock.NewFakePassiveClock(tc.now))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideTTL (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideTTLIgnoresRecreatedJobUID(t *testing.T) {
	// The decision is about one object; the UID precondition on the delete
	// (see deleteTrainJobOptions) is what keeps a decision made on an old
	// incarnation from deleting a new one of the same name.
	old := job(cond(api.TrainJobComplete, metav1.ConditionTrue, "JobsCompleted", t0))
	recreated := job()
	recreated.UID = "uid-2"
	clk := testingclock.NewFakePassiveClock(t0.Add(time.Hour))
	if d := DecideTTL(old, &RuntimeTTL{Seconds: 60}, clk); !d.Delete {
		t.Fatalf("old incarnation: DecideTTL = %+v, want Delete", d)
	}
	if d := DecideTTL(recreated, &RuntimeTTL{Seconds: 60}, clk); d.Delete || d.RequeueAfter != 0 {
		t.Errorf("recreated (unfinished) incarnation: DecideTTL = %+v, want nothing", d)
	}
	opts := deleteTrainJobOptions(old)
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "uid-1" {
		t.Errorf("delete preconditions = %+v, want UID uid-1", opts.Preconditions)
	}
	if opts.PropagationPolicy == nil || *opts.PropagationPolicy != metav1.DeletePropagationBackground {
		t.Errorf("delete propagation = %v, want Background", opts.PropagationPolicy)
	}
}

func TestRequeueAfterClockSkew(t *testing.T) {
	now := t0
	cases := []struct {
		at   time.Time
		want time.Duration
	}{
		{now.Add(3 * time.Second), 3 * time.Second},
		{now, time.Second},
		{now.Add(-5 * time.Second), time.Second},
	}
	for _, tc := range cases {
		if got := requeueAfter(tc.at, now); got != tc.want {
			t.Errorf("requeueAfter(now%+v) = %v, want %v", tc.at.Sub(now), got, tc.want)
		}
	}
}

func TestControlledBy(t *testing.T) {
	const tj = types.UID("tj-uid")
	ref := func(uid types.UID, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "j", UID: uid, Controller: &controller}
	}
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{"controlled by the TrainJob", []metav1.OwnerReference{ref(tj, true)}, true},
		{"standalone (no owner)", nil, false},
		{"owned but not controlled by the TrainJob", []metav1.OwnerReference{ref(tj, false)}, false},
		{"controlled by another object", []metav1.OwnerReference{ref("other", true)}, false},
		{"a TrainJob of the same name, recreated", []metav1.OwnerReference{ref("old-uid", true)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{OwnerReferences: tc.refs}
			if got := controlledBy(obj, tj); got != tc.want {
				t.Errorf("controlledBy = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTTLSince: when the runtime's TTL took its value comes from the
// runtime's managedFields (either form), so a restarted shepherd derives
// the same; unrelated managers do not move it.
func TestTTLSince(t *testing.T) {
	at := func(n int) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(time.Duration(n) * time.Second))) }
	entry := func(manager string, when *metav1.Time, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: when,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	const (
		annotation = `{"f:metadata":{"f:annotations":{".":{},"f:shepherd.dev/ttl-seconds-after-finished":{}}}}`
		field      = `{"f:spec":{"f:ttlSecondsAfterFinished":{}}}`
		other      = `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:mlPolicy":{}}}`
	)
	cases := []struct {
		name    string
		managed []metav1.ManagedFieldsEntry
		want    time.Time
	}{
		{name: "no owner of the TTL: the runtime's creation", managed: []metav1.ManagedFieldsEntry{entry("kubectl", at(50), other)}, want: t0},
		{name: "the carrier annotation's owner", managed: []metav1.ManagedFieldsEntry{
			entry("kubectl-create", at(0), other), entry("kubectl-annotate", at(500), annotation), entry("labeller", at(900), other)}, want: t0.Add(500 * time.Second)},
		{name: "the seed field's owner", managed: []metav1.ManagedFieldsEntry{entry("helm", at(300), field)}, want: t0.Add(300 * time.Second)},
		{name: "several owners: the latest", managed: []metav1.ManagedFieldsEntry{
			entry("a", at(300), field), entry("b", at(700), annotation)}, want: t0.Add(700 * time.Second)},
		{name: "malformed fieldsV1 is no owner", managed: []metav1.ManagedFieldsEntry{entry("x", at(300), `{`)}, want: t0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := trainer.NewRuntime(api.KindClusterTrainingRuntime)
			rt.SetName("rt")
			rt.SetCreationTimestamp(metav1.NewTime(t0))
			rt.SetManagedFields(tc.managed)
			if diff := cmp.Diff(tc.want, TTLSince(rt)); diff != "" {
				t.Errorf("TTLSince (-want +got):\n%s", diff)
			}
		})
	}
}
