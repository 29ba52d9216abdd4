package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/integrations/trainer/runtimes"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// ControllerName names the controller, its event source and its logger.
const ControllerName = "trainjob-workload"

// unavailableRecheck is how often a TrainJob waiting for the Workload API is
// looked at again, so a cluster that enables the API later is followed.
const unavailableRecheck = 5 * time.Minute

// Reconciler creates a TrainJob's Workload and PodGroups.
type Reconciler struct {
	Client client.Client
	// APIReader reads Workloads uncached: the Workload API may not be
	// served, and an informer for an unserved kind would never sync.
	APIReader client.Reader
	// WorkloadAPI says which scheduling.k8s.io version to write in; ok is
	// false when the cluster serves none with both Workloads and PodGroups.
	WorkloadAPI func() (version string, ok bool, err error)
	Clock       clock.PassiveClock
	Recorder    events.EventRecorder

	// watcher starts the watches on Workloads and PodGroups once a
	// reconcile has discovered the version served (nil in unit tests).
	watcher *ownedWatcher
}

// ownedWatcher watches the Workloads and PodGroups of each discovered
// scheduling.k8s.io version, so that one deleted behind shepherd's back is
// recreated at once. The watches start lazily, at the first reconcile that
// finds the version served: an informer for a kind the apiserver does not
// serve would never sync, and a cluster may enable the API later.
type ownedWatcher struct {
	ctrl  controller.Controller
	cache cache.Cache

	mu      sync.Mutex
	started map[string]bool
}

// ensure starts the watches for version unless they run already.
func (w *ownedWatcher) ensure(version string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started[version] {
		return nil
	}
	for _, kind := range []string{api.KindWorkload, api.KindPodGroup} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(api.SchedulingGroup + "/" + version)
		u.SetKind(kind)
		src := source.Kind[client.Object](w.cache, u,
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return TrainJobsFor(o)
			}),
			OwnedGone())
		if err := w.ctrl.Watch(src); err != nil {
			return fmt.Errorf("watching %s %s/%s: %w", kind, api.SchedulingGroup, version, err)
		}
	}
	w.started[version] = true
	return nil
}

// Permissions the controller needs (for RBAC generation).
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/status,verbs=get;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainingruntimes;clustertrainingruntimes,verbs=get;list;watch
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadrecords,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=workloads;podgroups,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the controller with mgr.
func Setup(mgr ctrl.Manager, clk clock.PassiveClock, workloadAPI func() (string, bool, error)) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if workloadAPI == nil {
		// Without serve's probe (integrations.WorkloadAPIProbe), discovery
		// is asked at every reconcile that needs it.
		dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("creating a discovery client: %w", err)
		}
		workloadAPI = func() (string, bool, error) {
			w, err := integrations.DiscoverWorkloadAPI(dc)
			return w.Version, w.Version != "", err
		}
	}
	r := &Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		WorkloadAPI: workloadAPI,
		Clock:       clk,
		Recorder:    mgr.GetEventRecorder(ControllerName),
	}
	if err := runtimes.Index(mgr); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		// Status churn (Trainer's jobsStatus and conditions) cannot change
		// what to create; spec changes and (re)lists can.
		For(&trainerv1alpha1.TrainJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A record deleted behind shepherd's back is written again.
		Owns(&shepherdv1alpha1.WorkloadRecord{}, builder.WithPredicates(record.DeletedOnly())).
		Watches(trainer.NewRuntime(api.KindClusterTrainingRuntime), handler.EnqueueRequestsFromMapFunc(runtimes.JobsOf(r.Client))).
		Watches(trainer.NewRuntime(api.KindTrainingRuntime), handler.EnqueueRequestsFromMapFunc(runtimes.JobsOf(r.Client))).
		Build(r)
	if err != nil {
		return err
	}
	r.watcher = &ownedWatcher{ctrl: c, cache: mgr.GetCache(), started: map[string]bool{}}
	return nil
}

// Reconcile makes sure one TrainJob has its Workload and PodGroups.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := time.Now()
	defer func() { reconcileDurationSeconds.Observe(time.Since(start).Seconds()) }()

	var tj trainerv1alpha1.TrainJob
	if err := r.Client.Get(ctx, req.NamespacedName, &tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if err := r.dropLegacyCondition(ctx, &tj); err != nil {
		return ctrl.Result{}, err
	}
	rt, err := runtimes.Get(ctx, r.Client, &tj)
	if err != nil || rt == nil {
		return ctrl.Result{}, err
	}
	plan, ok := PlanFor(&tj, rt)
	if !ok {
		return ctrl.Result{}, nil
	}
	version, served, err := r.WorkloadAPI()
	if err != nil {
		return ctrl.Result{}, err
	}
	if !served {
		msg := fmt.Sprintf("the runtime uses podGroupPolicy.workload but the cluster serves no Workload API "+
			"(%s %s): enable the GenericWorkload feature gate and the API, or use another podGroupPolicy",
			api.SchedulingGroup, strings.Join(api.SchedulingVersions, ", "))
		changed, err := r.setCondition(ctx, &tj, metav1.ConditionFalse, api.ReasonWorkloadAPIUnavailable, msg, nil)
		if err != nil {
			return ctrl.Result{}, err
		}
		if changed {
			r.Recorder.Eventf(&tj, nil, corev1.EventTypeWarning, api.EventWorkloadAPIMissing, "CreateWorkload", "%s", msg)
		}
		return ctrl.Result{RequeueAfter: unavailableRecheck}, nil
	}
	if err := r.watcher.ensure(version); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.ensure(ctx, &tj, plan, version)
}

// ensure creates whatever of tj's Workload and PodGroups is missing.
func (r *Reconciler) ensure(ctx context.Context, tj *trainerv1alpha1.TrainJob, plan Plan, version string) error {
	log := ctrl.LoggerFrom(ctx).WithValues("version", version)
	wl := BuildWorkload(tj, plan, version)
	created, err := r.createIfMissing(ctx, wl)
	if err != nil {
		return err
	}
	if !ControlledBy(wl, tj.UID) {
		return r.foreign(ctx, tj, wl)
	}
	if created {
		workloadsCreatedTotal.WithLabelValues(version).Inc()
		log.Info("created Workload", "workload", wl.GetName())
	}
	names := make([]string, 0, len(plan.Templates))
	for _, t := range plan.Templates {
		pg := BuildPodGroup(tj, t, version, wl.GetName(), wl.GetUID())
		pgCreated, err := r.createIfMissing(ctx, pg)
		if err != nil {
			return err
		}
		if !ControlledBy(pg, tj.UID) {
			return r.foreign(ctx, tj, pg)
		}
		if pgCreated && !created {
			log.Info("recreated PodGroup", "podGroup", pg.GetName())
		}
		names = append(names, pg.GetName())
	}
	msg := fmt.Sprintf("Workload %s with PodGroups %s (%s/%s)", wl.GetName(), strings.Join(names, ", "), api.SchedulingGroup, version)
	changed, err := r.setCondition(ctx, tj, metav1.ConditionTrue, api.ReasonWorkloadCreated, msg,
		&shepherdv1alpha1.PodGroups{APIVersion: api.SchedulingGroup + "/" + version, Workload: wl.GetName(), Names: names})
	if err != nil {
		return err
	}
	// The Event goes with the condition, not with the create: a replica
	// that died between creating the Workload and writing the condition
	// leaves the next leader to find the Workload already there — it still
	// writes the condition, so the Event is still sent, once.
	if changed {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeNormal, api.EventWorkloadCreated, "CreateWorkload", "Created %s", msg)
	}
	return nil
}

// foreign reports that o, which shepherd would have created for tj, exists
// and is not controlled by tj: a WorkloadReady=False condition (reason
// api.ReasonWorkloadNotOwned) and, when that is news, a Warning Event. The error
// is terminal: retrying cannot help until o changes, and its deletion
// (the garbage collector removing an earlier TrainJob's Workload, or a user
// removing theirs) enqueues tj through the watch on Workloads and PodGroups.
func (r *Reconciler) foreign(ctx context.Context, tj *trainerv1alpha1.TrainJob, o *unstructured.Unstructured) error {
	msg := ForeignMessage(o)
	changed, err := r.setCondition(ctx, tj, metav1.ConditionFalse, api.ReasonWorkloadNotOwned, msg, nil)
	if err != nil {
		return err
	}
	if changed {
		r.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, api.EventWorkloadNotOwned, "CreateWorkload", "%s", msg)
	}
	return reconcile.TerminalError(fmt.Errorf("%s", msg))
}

// createIfMissing creates o; if it exists already, o is replaced by the
// stored object. created reports whether this call created it.
func (r *Reconciler) createIfMissing(ctx context.Context, o *unstructured.Unstructured) (created bool, err error) {
	err = r.Client.Create(ctx, o, client.FieldOwner(api.FieldManager))
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
	if err := r.APIReader.Get(ctx, key, o); err != nil {
		return false, fmt.Errorf("reading existing %s %s: %w", o.GetKind(), key, err)
	}
	return false, nil
}

// dropLegacyCondition removes the WorkloadReady condition an earlier
// shepherd wrote on the TrainJob itself (it now lives in the record):
// Trainer prints a job's last condition as its STATE, so a stale one would
// keep showing. One merge patch of the conditions list guarded by the
// resourceVersion read, once per job upgraded; none for any other job.
func (r *Reconciler) dropLegacyCondition(ctx context.Context, tj *trainerv1alpha1.TrainJob) error {
	if meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobWorkloadReady) == nil {
		return nil
	}
	orig := tj.DeepCopy()
	meta.RemoveStatusCondition(&tj.Status.Conditions, api.TrainJobWorkloadReady)
	if err := r.Client.Status().Patch(ctx, tj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing the legacy %s condition from TrainJob %s/%s: %w", api.TrainJobWorkloadReady, tj.Namespace, tj.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("removed the WorkloadReady condition an earlier shepherd wrote on the TrainJob; it lives in the TrainJob's WorkloadRecord now")
	return nil
}

// RecordManager is the field manager of this controller's part of a
// TrainJob's WorkloadRecord: its PodGroups and the WorkloadReady condition.
const RecordManager = "shepherd-trainjob-workload"

// setCondition records on tj's WorkloadRecord whether its Workload and
// PodGroups exist (the condition WorkloadReady, with pg naming them when
// they do) — on shepherd's own object, not the TrainJob, whose conditions
// Trainer shows as its state. changed reports a write.
func (r *Reconciler) setCondition(ctx context.Context, tj *trainerv1alpha1.TrainJob, status metav1.ConditionStatus, reason, msg string, pg *shepherdv1alpha1.PodGroups) (changed bool, err error) {
	rec, err := record.Get(ctx, r.Client, api.KindTrainJob, tj)
	if err != nil {
		return false, err
	}
	ltt := metav1.NewTime(r.Clock.Now())
	if rec != nil {
		if c := meta.FindStatusCondition(rec.Status.Conditions, api.TrainJobWorkloadReady); c != nil && c.Status == status {
			if c.Reason == reason && c.Message == msg && equality.Semantic.DeepEqual(rec.Status.PodGroups, pg) {
				return false, nil
			}
			ltt = c.LastTransitionTime
		}
	}
	want := record.For(tj, trainerv1alpha1.GroupVersion.WithKind(api.KindTrainJob))
	want.Status.PodGroups = pg
	want.Status.Conditions = []metav1.Condition{{
		Type: api.TrainJobWorkloadReady, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: ltt, ObservedGeneration: tj.Generation,
	}}
	if err := record.Apply(ctx, r.Client, want, RecordManager); err != nil {
		return false, fmt.Errorf("recording %s=%s for TrainJob %s/%s: %w", api.TrainJobWorkloadReady, status, tj.Namespace, tj.Name, err)
	}
	return true, nil
}
