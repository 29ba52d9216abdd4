package training

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// cliqueReconciler writes the Succeeded condition of Training PodCliques.
type cliqueReconciler struct {
	client client.Client
	clock  clock.PassiveClock
}

func (r *cliqueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pclq grovev1alpha1.PodClique
	if err := r.client.Get(ctx, req.NamespacedName, &pclq); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pclq.DeletionTimestamp != nil || CliqueSucceeded(&pclq) {
		return ctrl.Result{}, nil
	}
	pcs, err := trainingSet(ctx, r.client, &pclq)
	if err != nil || pcs == nil {
		return ctrl.Result{}, err
	}
	pods, err := gang.OwnedPods(ctx, r.client, indexPodOwner, &pclq)
	if err != nil {
		return ctrl.Result{}, err
	}
	marker, err := gang.ActiveMarker(pclq.Annotations)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "ignoring the restart marker", "podclique", req.NamespacedName)
		marker = nil
	}
	conds, changed := DecideCliqueSucceeded(r.clock, &pclq, pods, marker)
	if !changed {
		return ctrl.Result{}, nil
	}
	orig := pclq.DeepCopy()
	pclq.Status.Conditions = conds
	if err := r.client.Status().Patch(ctx, &pclq, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patching status of PodClique %s: %w", req.NamespacedName, err)
	}
	ctrl.LoggerFrom(ctx).Info("PodClique succeeded", "podclique", req.NamespacedName)
	return ctrl.Result{}, nil
}

// setReconciler runs the lifecycle of Training PodCliqueSets.
type setReconciler struct {
	client   client.Client
	deleter  *gang.Deleter
	clock    clock.PassiveClock
	recorder recorder.EventRecorder
}

func (r *setReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("podcliqueset", req.NamespacedName)
	var pcs grovev1alpha1.PodCliqueSet
	if err := r.client.Get(ctx, req.NamespacedName, &pcs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pcs.DeletionTimestamp != nil || !gang.IsTraining(&pcs) {
		return ctrl.Result{}, nil
	}
	in := Input{Set: &pcs}
	var cliques grovev1alpha1.PodCliqueList
	if err := r.client.List(ctx, &cliques, client.InNamespace(pcs.Namespace), client.MatchingFields{indexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliques of %s: %w", req.NamespacedName, err)
	}
	for _, c := range cliques.Items {
		if c.DeletionTimestamp == nil {
			in.Cliques = append(in.Cliques, c)
		}
	}
	var groups grovev1alpha1.PodCliqueScalingGroupList
	if err := r.client.List(ctx, &groups, client.InNamespace(pcs.Namespace), client.MatchingLabels{api.LabelPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliqueScalingGroups of %s: %w", req.NamespacedName, err)
	}
	in.Groups = groups.Items
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pcs.Namespace), client.MatchingFields{indexPodPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing pods of %s: %w", req.NamespacedName, err)
	}
	in.Pods = pods.Items

	d := Decide(r.clock, in)

	// 1. Restart markers, before anything is counted or deleted.
	for _, m := range d.Marks {
		if err := r.annotate(ctx, pcs.Namespace, m.Clique, m.Marker.String()); err != nil {
			return ctrl.Result{}, err
		}
	}
	// 2. The commit: phase, startTime, restartCount, Failed.
	if d.Status.Changed(&pcs) {
		orig := pcs.DeepCopy()
		pcs.Status.Phase, pcs.Status.RestartCount, pcs.Status.StartTime, pcs.Status.Conditions =
			d.Status.Phase, d.Status.RestartCount, d.Status.StartTime, d.Status.Conditions
		if err := r.client.Status().Patch(ctx, &pcs, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// Nothing after the commit may happen without it; the
				// markers already written make the next reconcile resume.
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, fmt.Errorf("patching status of PodCliqueSet %s: %w", req.NamespacedName, err)
		}
		log.Info("Training status", "phase", d.Status.Phase, "restartCount", d.Status.RestartCount)
	}
	// 3. Events and metrics of what was committed.
	for _, e := range d.Events {
		var regarding client.Object = &pcs
		if c := findClique(in.Cliques, e.Clique); c != nil {
			regarding = c
		}
		r.recorder.Eventf(regarding, nil, e.Type, e.Reason, e.Reason, "%s", e.Note)
	}
	if d.Restarts > 0 {
		restarts.Add(float64(d.Restarts))
	}
	if d.Failure != "" {
		failures.WithLabelValues(d.Failure).Inc()
	}
	// 4. Pod deletions.
	victims := make([]*corev1.Pod, 0, len(d.DeletePods))
	for _, p := range d.DeletePods {
		victims = append(victims, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pcs.Namespace, Name: p.Name, UID: p.UID}})
	}
	if _, err := gang.DeleteAllExact(ctx, r.deleter, victims); err != nil {
		return ctrl.Result{}, err
	}
	// 5. Cliques through their restart get a done marker.
	for _, m := range d.Finishes {
		if err := r.annotate(ctx, pcs.Namespace, m.Clique, m.Marker.String()); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// annotate sets the restart marker of a PodClique with a merge patch of that
// one annotation.
func (r *setReconciler) annotate(ctx context.Context, ns, name, value string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationRestart: value}}})
	if err != nil {
		return fmt.Errorf("encoding the restart marker: %w", err)
	}
	pclq := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := r.client.Patch(ctx, pclq, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the restart marker of PodClique %s/%s: %w", ns, name, err)
	}
	return nil
}

func findClique(cliques []grovev1alpha1.PodClique, name string) *grovev1alpha1.PodClique {
	for i := range cliques {
		if name != "" && cliques[i].Name == name {
			return &cliques[i]
		}
	}
	return nil
}
