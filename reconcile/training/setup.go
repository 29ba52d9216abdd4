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
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
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
// +kubebuilder:rbac:groups=grove.io,resources=podcliquesets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=grove.io,resources=podcliquesets/status,verbs=get;patch
// +kubebuilder:rbac:groups=grove.io,resources=podcliques,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=grove.io,resources=podcliques/status,verbs=get;patch
// +kubebuilder:rbac:groups=grove.io,resources=podcliquescalinggroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the Training PodClique and PodCliqueSet controllers.
// schemas answers which fields the served Grove schemas have, which decides
// where the Training status (phase, restartCount, startTime) and a Training
// clique's wasAvailable are written (nil: the carrier annotations). It takes
// no integrations.Enforcement: Grove has no Training workloads, so R-TR is
// shepherd's alone, and its breach detection reads pods, not whoever's
// MinAvailableBreached.
func Setup(mgr ctrl.Manager, clk clock.PassiveClock, schemas knob.FieldSchemas) error {
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
	if err := idx.IndexField(ctx, &grovev1alpha1.PodClique{}, indexPartOf, partOf); err != nil {
		return fmt.Errorf("indexing PodCliques by PodCliqueSet: %w", err)
	}
	// shepherd's field manager, as package gang's writes (see gang.Gate).
	c := client.WithFieldOwner(mgr.GetClient(), api.FieldManager)
	del, err := gang.NewDeleter(mgr)
	if err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("training-podclique").
		For(&grovev1alpha1.PodClique{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &grovev1alpha1.PodClique{})).
		Complete(&cliqueReconciler{client: c, clock: clk, schemas: schemas}); err != nil {
		return fmt.Errorf("building the Training PodClique controller: %w", err)
	}
	toSet := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if v := o.GetLabels()[api.LabelPartOf]; v != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: v}}}
		}
		return nil
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named("training-podcliqueset").
		For(&grovev1alpha1.PodCliqueSet{}).
		Watches(&grovev1alpha1.PodClique{}, toSet).
		Watches(&corev1.Pod{}, toSet).
		Complete(&setReconciler{client: c, deleter: del, clock: clk, schemas: schemas, recorder: mgr.GetEventRecorder("shepherd-training")}); err != nil {
		return fmt.Errorf("building the Training PodCliqueSet controller: %w", err)
	}
	return nil
}

// trainingSet fetches the PodCliqueSet an object is part of, nil unless it
// exists and is a Training workload.
func trainingSet(ctx context.Context, c client.Reader, o client.Object) (*grovev1alpha1.PodCliqueSet, error) {
	pcs, err := gang.ParentSet(ctx, c, o)
	if err != nil || pcs == nil || !grove.IsTrainingSet(pcs) {
		return nil, err
	}
	return pcs, nil
}
