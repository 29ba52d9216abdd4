package training

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

// Cache indexes this package registers (its own names, so it can run beside
// package gang on one manager, or without it).
const (
	indexPodOwner  = "training.shepherd.dev/pod-owner-podclique"
	indexPodPartOf = "training.shepherd.dev/pod-part-of"
	indexPartOf    = "training.shepherd.dev/part-of"
)

const conflictRetry = 200 * time.Millisecond

// Permissions the controllers need (for RBAC generation; test/rbac checks
// the shipped RBAC grants them).
// +kubebuilder:rbac:groups=grove.io,resources=podcliquesets,verbs=get;list;watch
// +kubebuilder:rbac:groups=grove.io,resources=podcliques,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=shepherd.dev,resources=workloadrecords,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=grove.io,resources=podcliquescalinggroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the Training PodCliqueSet controller. What it derives
// goes to each set's WorkloadRecord, whatever the served Grove schema. It
// takes no integrations.Enforcement: Grove has no Training workloads, so
// R-TR is shepherd's alone, and its breach detection reads pods, not
// whoever's MinAvailableBreached.
func Setup(mgr ctrl.Manager, clk clock.PassiveClock) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	partOf := func(o client.Object) []string {
		if v := o.GetLabels()[api.LabelPartOf]; v != "" {
			return []string{v}
		}
		return nil
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodOwner, gang.PodOwners); err != nil {
		return fmt.Errorf("indexing pods by owning PodClique: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodPartOf, partOf); err != nil {
		return fmt.Errorf("indexing pods by PodCliqueSet: %w", err)
	}
	if err := idx.IndexField(ctx, grove.NewObject(api.KindPodClique), indexPartOf, partOf); err != nil {
		return fmt.Errorf("indexing PodCliques by PodCliqueSet: %w", err)
	}
	// shepherd's field manager: no MinAvailableBreached is ever its (gang.Sign).
	c := client.WithFieldOwner(mgr.GetClient(), api.FieldManager)
	del, err := gang.NewDeleter(mgr)
	if err != nil {
		return err
	}
	toSet := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if v := o.GetLabels()[api.LabelPartOf]; v != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: v}}}
		}
		return nil
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named("training-podcliqueset").
		For(grove.NewObject(api.KindPodCliqueSet)).
		Watches(grove.NewObject(api.KindPodClique), toSet).
		Watches(&corev1.Pod{}, toSet).
		// Each write to the record brings the next reconcile, which
		// decides the next write (one write per reconcile); a record
		// deleted behind shepherd's back is written again.
		Owns(&shepherdv1alpha1.WorkloadRecord{}).
		Complete(&setReconciler{client: c, deleter: del, clock: clk, recorder: mgr.GetEventRecorder("shepherd-training")}); err != nil {
		return fmt.Errorf("building the Training PodCliqueSet controller: %w", err)
	}
	return nil
}
