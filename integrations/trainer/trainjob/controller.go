package trainjob

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	shepherdevents "github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/integrations/trainer/runtimes"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// ControllerName names the controller, its event source and its logger.
const ControllerName = "trainjob-lifecycle"

// maxConcurrentReconciles lets several deadlines that fall in the same
// instant be enforced together; each reconcile is a few API calls.
const maxConcurrentReconciles = 8

// Reconciler enforces a TrainJob's active deadline and its runtime's TTL.
type Reconciler struct {
	Client client.Client
	// APIReader reads what is not cached: Trainer's runtime snapshot of a
	// finished job whose runtime is gone (snapshot.go). nil: none is read.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	// Lifecycle writes the DeadlineExceeded and TTLExpired Events, each
	// before its action, under a name fixed by the TrainJob's UID, so a
	// leader killed mid-action loses none and its successor duplicates
	// none (shepherdevents.Lifecycle).
	Lifecycle *shepherdevents.Lifecycle
	// Enforcement says, at every decision, whether shepherd enforces the
	// deadline (integrations.FeatureDeadline) or Trainer does; nil means
	// shepherd does. The TTL is always shepherd's: Trainer has none.
	Enforcement *integrations.Enforcement

	// invalidTTL remembers, per runtime UID, the resourceVersion whose
	// malformed TTL was last reported, so each bad version is reported
	// once rather than at every reconcile of each of its jobs. It only
	// rations a warning; no decision depends on it, so a restart that
	// forgets it loses nothing.
	invalidTTL sync.Map
}

// Permissions the controller needs (for RBAC generation).
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/status,verbs=get;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainingruntimes;clustertrainingruntimes,verbs=get;list;watch
// +kubebuilder:rbac:groups=jobset.x-k8s.io,resources=jobsets,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadrecords,verbs=get;list;watch;create;patch

// Setup registers the controller with mgr. enf decides whether shepherd or
// Trainer enforces the deadline; nil means shepherd always does.
func Setup(mgr ctrl.Manager, clk clock.PassiveClock, enf *integrations.Enforcement) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	lc, err := shepherdevents.LifecycleRecorder(mgr, ControllerName)
	if err != nil {
		return err
	}
	r := &Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Clock:       clk,
		Recorder:    mgr.GetEventRecorder(ControllerName),
		Lifecycle:   lc,
		Enforcement: enf,
	}
	if err := runtimes.Index(mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&trainerv1alpha1.TrainJob{}).
		// JobSets are read from a metadata-only cache (names, UIDs and
		// owners are all the deadline needs), so deleting a failed job's
		// JobSet costs no extra read. A JobSet that appears after its
		// TrainJob already failed brings the TrainJob back for cleanup.
		Owns(jobSetMetadata(), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		// A record deleted behind shepherd's back is written again; the
		// record's other changes are shepherd's own writes.
		Owns(&shepherdv1alpha1.WorkloadRecord{}, builder.WithPredicates(record.DeletedOnly())).
		Watches(trainer.NewRuntime(api.KindClusterTrainingRuntime), handler.EnqueueRequestsFromMapFunc(runtimes.JobsOf(r.Client))).
		Watches(trainer.NewRuntime(api.KindTrainingRuntime), handler.EnqueueRequestsFromMapFunc(runtimes.JobsOf(r.Client))).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Complete(r)
}

// Reconcile applies the deadline, then the TTL, to one TrainJob.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	defer func() { reconcileDurationSeconds.Observe(time.Since(start).Seconds()) }()
	log := ctrl.LoggerFrom(ctx)

	var tj trainerv1alpha1.TrainJob
	if err := r.Client.Get(ctx, req.NamespacedName, &tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	var result ctrl.Result
	d := DecideDeadline(&tj, r.Clock, r.Enforcement.Enforces(integrations.FeatureDeadline))
	switch d.Action {
	case DeadlineExceed:
		if err := r.exceed(ctx, &tj, d.Deadline); err != nil {
			return ctrl.Result{}, err
		}
		// tj now carries Failed=True as written, so the TTL below sees a
		// finished job (a TTL of 0 deletes it in this same reconcile).
	case DeadlineCleanup:
		if err := r.deleteJobSet(ctx, &tj); err != nil {
			return ctrl.Result{}, err
		}
	case DeadlineWait:
		log.V(1).Info("deadline ahead", "deadline", d.Deadline, "requeueAfter", d.RequeueAfter)
		result.RequeueAfter = d.RequeueAfter
	case DeadlineUpstream:
		log.V(1).Info("deadline passed; Trainer enforces it, shepherd stands down", "deadline", d.Deadline)
	}

	ttl, err := r.runtimeTTL(ctx, &tj, Finished(&tj))
	if err != nil {
		return ctrl.Result{}, err
	}
	t := DecideTTL(&tj, ttl, r.Clock)
	if t.Delete {
		return ctrl.Result{}, r.deleteTrainJob(ctx, &tj, ttl.Seconds)
	}
	if t.RequeueAfter > 0 && (result.RequeueAfter == 0 || t.RequeueAfter < result.RequeueAfter) {
		result.RequeueAfter = t.RequeueAfter
	}
	part := RecordPart(&tj, ttl, t.ExpiresAt, r.Enforcement.Enforces(integrations.FeatureDeadline))
	if err := r.writeRecord(ctx, &tj, part); err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// exceed marks tj Failed/DeadlineExceeded, records it, then deletes its
// JobSet. Only the conditions list is written, by a merge patch guarded by
// resourceVersion, so a concurrent writer's change is never overwritten.
func (r *Reconciler) exceed(ctx context.Context, tj *trainerv1alpha1.TrainJob, deadline time.Time) error {
	now := r.Clock.Now()
	// The Event first: once the status says Failed, a leader killed now
	// would leave the next one nothing to do, and nothing to record.
	if err := r.Lifecycle.Record(ctx, tj, corev1.EventTypeWarning, api.EventDeadlineExceeded, "FailTrainJob", "",
		fmt.Sprintf("%s: activeDeadlineSeconds %d passed at %s", api.MessageDeadlineExceeded,
			*tj.Spec.ActiveDeadlineSeconds, deadline.UTC().Format(time.RFC3339))); err != nil {
		return err
	}
	orig := tj.DeepCopy()
	meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type:               api.TrainJobFailed,
		Status:             metav1.ConditionTrue,
		Reason:             api.ReasonDeadlineExceeded,
		Message:            api.MessageDeadlineExceeded,
		LastTransitionTime: metav1.NewTime(now),
		ObservedGeneration: tj.Generation,
	})
	if err := r.Client.Status().Patch(ctx, tj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("marking TrainJob %s/%s Failed (DeadlineExceeded): %w", tj.Namespace, tj.Name, err)
	}
	deadlineExceededTotal.Inc()
	deadlineLagSeconds.Observe(now.Sub(deadline).Seconds())
	ctrl.LoggerFrom(ctx).Info("TrainJob exceeded its active deadline", "deadline", deadline, "lag", now.Sub(deadline))
	return r.deleteJobSet(ctx, tj)
}

// jobSetMetadata is an empty metadata-only JobSet.
func jobSetMetadata() *metav1.PartialObjectMetadata {
	js := &metav1.PartialObjectMetadata{}
	js.SetGroupVersionKind(jobsetv1alpha2.GroupVersion.WithKind(api.KindJobSet))
	return js
}

// deleteJobSet deletes the JobSet Trainer runs tj with: same name, same
// namespace. A JobSet controlled by something else (e.g. an older TrainJob
// of the same name) is left alone, and the UID precondition keeps a JobSet
// recreated meanwhile from being deleted by mistake.
// controlledBy reports whether obj's controller ownerReference is the
// object with uid. Ownership, not a shared name, decides what shepherd may
// delete: a user's standalone JobSet that happens to bear the TrainJob's
// name, or one another controller owns, is not the TrainJob's to lose.
func controlledBy(obj metav1.Object, uid types.UID) bool {
	owner := metav1.GetControllerOf(obj)
	return owner != nil && owner.UID == uid
}

func (r *Reconciler) deleteJobSet(ctx context.Context, tj *trainerv1alpha1.TrainJob) error {
	js := jobSetMetadata()
	key := types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name}
	if err := r.Client.Get(ctx, key, js); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("reading JobSet %s of TrainJob: %w", key, err)
	}
	if !controlledBy(js, tj.UID) {
		ctrl.LoggerFrom(ctx).Info("not deleting a JobSet this TrainJob does not control", "jobset", key, "controller", metav1.GetControllerOf(js))
		return nil
	}
	if !js.DeletionTimestamp.IsZero() {
		return nil
	}
	err := r.Client.Delete(ctx, js, client.Preconditions{UID: &js.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting JobSet %s of a TrainJob past its deadline: %w", key, err)
	}
	return nil
}

// runtimeTTL reads ttlSecondsAfterFinished (seed field or carrier) from the
// runtime tj references, with since when it has had its value (TTLSince);
// when that runtime is gone and the job finished, from Trainer's snapshot
// of it (snapshotTTL);
// nil when the runtime sets none, is missing without a snapshot or is not
// a Trainer runtime. A malformed TTL is no TTL — deleting a job on a
// value nobody meant would be the one mistake that cannot be undone — and
// is reported once per runtime version (log and Warning Event on the
// runtime), not returned as an error: retrying cannot fix it, and the
// runtime watch brings the jobs back once it is fixed.
func (r *Reconciler) runtimeTTL(ctx context.Context, tj *trainerv1alpha1.TrainJob, finished bool) (*RuntimeTTL, error) {
	rt, err := runtimes.Get(ctx, r.Client, tj)
	if err != nil {
		return nil, err
	}
	if rt == nil {
		if !finished {
			// Only a finished job's TTL is due; the snapshot is an
			// uncached read, made once the job finished.
			return nil, nil
		}
		return r.snapshotTTL(ctx, tj)
	}
	ttl, err := trainer.RuntimeTTLOf(rt)
	if err != nil {
		r.reportInvalidTTL(ctx, rt, err)
		return nil, nil
	}
	if ttl == nil {
		return nil, nil
	}
	return &RuntimeTTL{Seconds: *ttl, Since: TTLSince(rt)}, nil
}

// reportInvalidTTL logs and records a runtime's malformed TTL, once per
// runtime resourceVersion.
func (r *Reconciler) reportInvalidTTL(ctx context.Context, rt client.Object, err error) {
	if prev, loaded := r.invalidTTL.Swap(rt.GetUID(), rt.GetResourceVersion()); loaded && prev == rt.GetResourceVersion() {
		return
	}
	kind := api.KindClusterTrainingRuntime
	if rt.GetNamespace() != "" {
		kind = api.KindTrainingRuntime
	}
	ctrl.LoggerFrom(ctx).Error(err, "ignoring the malformed ttlSecondsAfterFinished of a runtime: its finished TrainJobs are kept",
		"runtimeKind", kind, "runtime", client.ObjectKeyFromObject(rt))
	r.Recorder.Eventf(rt, nil, corev1.EventTypeWarning, api.EventInvalidKnob, "ReadTTL",
		"%s %s: %v; no TTL applies to its finished TrainJobs until it is fixed", kind, rt.GetName(), err)
}

// deleteTrainJobOptions are the options of a TTL deletion: a UID
// precondition, so that a TrainJob deleted and recreated under the same name
// since tj was read is never deleted by tj's TTL, and background
// propagation, so the delete returns at once and the garbage collector
// removes the JobSet, Workload and PodGroups.
func deleteTrainJobOptions(tj *trainerv1alpha1.TrainJob) *client.DeleteOptions {
	uid := tj.UID
	opts := &client.DeleteOptions{}
	client.Preconditions{UID: &uid}.ApplyToDelete(opts)
	client.PropagationPolicy(metav1.DeletePropagationBackground).ApplyToDelete(opts)
	return opts
}

// DeleteTrainJob deletes the TrainJob tj — only the incarnation with tj's
// UID — with background propagation. deleted is false when there was
// nothing to delete: the TrainJob is gone, or its name now belongs to a new
// TrainJob (the UID precondition failed), which has timers of its own.
func DeleteTrainJob(ctx context.Context, c client.Client, tj *trainerv1alpha1.TrainJob) (deleted bool, err error) {
	if err := c.Delete(ctx, tj, deleteTrainJobOptions(tj)); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("deleting TrainJob %s/%s after its TTL: %w", tj.Namespace, tj.Name, err)
	}
	return true, nil
}

// deleteTrainJob deletes a finished TrainJob whose TTL expired and records it.
func (r *Reconciler) deleteTrainJob(ctx context.Context, tj *trainerv1alpha1.TrainJob, ttl int32) error {
	// The Event first: once the TrainJob is gone nobody can tell it was
	// shepherd's TTL that took it.
	if err := r.Lifecycle.Record(ctx, tj, corev1.EventTypeNormal, api.EventTTLExpired, "DeleteTrainJob", "",
		fmt.Sprintf("Deleted: finished and ttlSecondsAfterFinished (%ds) of its runtime passed", ttl)); err != nil {
		return err
	}
	deleted, err := DeleteTrainJob(ctx, r.Client, tj)
	if err != nil || !deleted {
		return err
	}
	ttlDeletionsTotal.Inc()
	ctrl.LoggerFrom(ctx).Info("deleted TrainJob after its TTL", "ttlSecondsAfterFinished", ttl)
	return nil
}
