package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// Cache indexes this package registers. The names are this package's own so
// package training can register its indexes beside them on the same manager.
const (
	// IndexPartOf indexes PodCliques and PodCliqueScalingGroups by the
	// PodCliqueSet they are part of (Grove's app.kubernetes.io/part-of).
	IndexPartOf = "gang.shepherd.dev/part-of"
	// IndexPodPartOf indexes Pods by the same label.
	IndexPodPartOf = "gang.shepherd.dev/pod-part-of"
)

// workers is the controller's MaxConcurrentReconciles. Breach times have
// second precision, so every set that breached in the same second expires
// at the same instant; with one worker their terminations would queue
// behind each other (measured by BenchmarkGangTermination in test/grove).
const workers = 8

// conflictRetry is how soon a reconcile whose optimistic-lock write lost a
// race looks again; the next read sees the winner's write.
const conflictRetry = 200 * time.Millisecond

// Permissions the controller needs (for RBAC generation; test/rbac checks
// the shipped RBAC grants them). It writes no PodClique or scaling group:
// what it derives goes to the set's WorkloadRecord.
// +kubebuilder:rbac:groups=grove.io,resources=podcliques,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=grove.io,resources=podcliquescalinggroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=grove.io,resources=podcliquesets,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadrecords,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create

// Setup registers the gang-termination controller for Inference
// PodCliqueSets with mgr. enf holds the gang-termination setting (nil:
// auto); under auto the decision who enforces is each set's own (Decide).
func Setup(mgr ctrl.Manager, clk clock.PassiveClock, enf *integrations.Enforcement) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	partOf := func(o client.Object) []string {
		if v := o.GetLabels()[api.LabelPartOf]; v != "" {
			return []string{v}
		}
		return nil
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexPodPartOf, partOf); err != nil {
		return fmt.Errorf("indexing pods by PodCliqueSet: %w", err)
	}
	if err := idx.IndexField(ctx, grove.NewObject(api.KindPodClique), IndexPartOf, partOf); err != nil {
		return fmt.Errorf("indexing PodCliques by PodCliqueSet: %w", err)
	}
	if err := idx.IndexField(ctx, grove.NewObject(api.KindPodCliqueScalingGroup), IndexPartOf, partOf); err != nil {
		return fmt.Errorf("indexing PodCliqueScalingGroups by PodCliqueSet: %w", err)
	}
	rec, err := events.LifecycleRecorder(mgr, "shepherd-gang")
	if err != nil {
		return err
	}
	del, err := NewDeleter(mgr)
	if err != nil {
		return err
	}
	toSet := handler.EnqueueRequestsFromMapFunc(byLabel(api.LabelPartOf))
	if err := ctrl.NewControllerManagedBy(mgr).Named("gang-podcliqueset").
		For(grove.NewObject(api.KindPodCliqueSet)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Watches(grove.NewObject(api.KindPodClique), toSet).
		Watches(grove.NewObject(api.KindPodCliqueScalingGroup), toSet).
		Watches(&corev1.Pod{}, toSet).
		// Each record write brings the next reconcile, which decides the
		// next write (one write per reconcile).
		Owns(&shepherdv1alpha1.WorkloadRecord{}).
		Complete(&setReconciler{client: mgr.GetClient(), deleter: del, clock: clk, lifecycle: rec, enf: enf}); err != nil {
		return fmt.Errorf("building the gang-termination controller: %w", err)
	}
	return nil
}

// PodOwners returns the names of the PodCliques that own a pod: the index
// function of IndexPodOwner, for other packages' indexes of the same key.
func PodOwners(o client.Object) []string {
	var out []string
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == api.KindPodClique && groupOf(ref.APIVersion) == api.GroveGroup {
			out = append(out, ref.Name)
		}
	}
	return out
}

func groupOf(apiVersion string) string {
	for i := range apiVersion {
		if apiVersion[i] == '/' {
			return apiVersion[:i]
		}
	}
	return ""
}

// byLabel maps an object to the same-namespace object named by its label.
func byLabel(key string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		v := o.GetLabels()[key]
		if v == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: v}}}
	}
}

// result turns a wait into a controller result.
func result(d time.Duration) ctrl.Result { return ctrl.Result{RequeueAfter: d} }
