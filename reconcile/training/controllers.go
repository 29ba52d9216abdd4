package training

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/reconcile/gang"
)

// cliqueReconciler writes the Succeeded condition and the wasAvailable of
// Training PodCliques.
type cliqueReconciler struct {
	client  client.Client
	clock   clock.PassiveClock
	schemas knob.FieldSchemas
}

func (r *cliqueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pclq grovev1alpha1.PodClique
	if err := r.client.Get(ctx, req.NamespacedName, &pclq); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if gang.Terminating(&pclq) || CliqueSucceeded(&pclq) {
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
	if _, err := gang.Marker(pclq.Annotations); err != nil {
		// A hand-edited marker must not stop Succeeded; it is treated as
		// absent.
		ctrl.LoggerFrom(ctx).Error(err, "ignoring the restart marker", "podclique", req.NamespacedName)
	}
	want, succeeded := DecideClique(r.clock, &pclq, pods, r.schemas)
	if _, err := gang.PatchClique(ctx, r.client, &pclq, want); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	if succeeded {
		ctrl.LoggerFrom(ctx).Info("PodClique succeeded", "podclique", req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// setReconciler runs the lifecycle of Training PodCliqueSets.
type setReconciler struct {
	client   client.Client
	deleter  *gang.Deleter
	clock    clock.PassiveClock
	schemas  knob.FieldSchemas
	recorder recorder.EventRecorder
}

func (r *setReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pcs grovev1alpha1.PodCliqueSet
	if err := r.client.Get(ctx, req.NamespacedName, &pcs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pcs.DeletionTimestamp != nil || !grove.IsTrainingSet(&pcs) {
		return ctrl.Result{}, nil
	}
	// A carrier that does not parse is reported (the error is logged and
	// retried with backoff) and nothing is done: guessing a restart count or
	// a limit could restart, or fail, a workload wrongly.
	st, err := grove.TrainingStatusOf(&pcs)
	if err != nil {
		return ctrl.Result{}, err
	}
	maxRestarts, maxRuntime, err := grove.TrainingLimits(&pcs)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("trainingSpec of PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	in := Input{Set: &pcs, Status: st, MaxRuntime: maxRuntime}
	if maxRestarts != nil {
		in.MaxRestarts = *maxRestarts
	}
	var cliques grovev1alpha1.PodCliqueList
	if err := r.client.List(ctx, &cliques, client.InNamespace(pcs.Namespace), client.MatchingFields{indexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliques of %s: %w", req.NamespacedName, err)
	}
	for _, c := range cliques.Items {
		if !gang.Terminating(&c) {
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
	return r.apply(ctx, &pcs, in.Cliques, d)
}

// apply makes the decision's one write, then — once a status write has
// landed — its events and metrics. Every write is guarded: the status and
// the marker by the resourceVersion the decision read (optimistic lock), the
// deletes by UID preconditions; a write that loses a race is not retried as
// is but decided again from a fresh read.
func (r *setReconciler) apply(ctx context.Context, pcs *grovev1alpha1.PodCliqueSet, cliques []grovev1alpha1.PodClique, d Decision) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("podcliqueset", client.ObjectKeyFromObject(pcs))
	switch d.Write {
	case WriteStatus:
		committed, err := PatchSet(ctx, r.client, pcs, d.Status.Apply(pcs, r.schemas))
		if committed {
			log.Info("Training status", "phase", d.Status.Phase, "restartCount", d.Status.RestartCount)
			r.record(pcs, cliques, d)
		}
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, err
		}
	case WriteMarker:
		if err := r.annotate(ctx, pcs.Namespace, d.Mark); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, err
		}
	case WriteDelete:
		victims := make([]*corev1.Pod, 0, len(d.Delete))
		for _, p := range d.Delete {
			victims = append(victims, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pcs.Namespace, Name: p.Name, UID: p.UID}})
		}
		if _, err := gang.DeleteAllExact(ctx, r.deleter, victims); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// record emits a committed decision's events and counts its metrics.
func (r *setReconciler) record(pcs *grovev1alpha1.PodCliqueSet, cliques []grovev1alpha1.PodClique, d Decision) {
	for _, e := range d.Events {
		var regarding client.Object = pcs
		if c := findClique(cliques, e.Clique); c != nil {
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
}

// annotate writes a restart marker: a merge patch of that one annotation
// carrying the resourceVersion the decision read, so the apiserver refuses
// it (Conflict) if the PodClique changed since — a marker decided on a
// stale cache must not overwrite a newer one.
func (r *setReconciler) annotate(ctx context.Context, ns string, m Mark) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": m.ResourceVersion,
		"annotations":     map[string]any{api.AnnotationRestart: m.Marker.String()},
	}})
	if err != nil {
		return fmt.Errorf("encoding the restart marker: %w", err)
	}
	pclq := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.Clique}}
	if err := r.client.Patch(ctx, pclq, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the restart marker of PodClique %s/%s: %w", ns, m.Clique, err)
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

// PatchSet writes what want changes on the PodCliqueSet cur, each part only
// if it changed and each with an optimistic lock, so that a restart is
// counted once whichever form holds the count. On the seed schema that is
// one write, the status. On Grove's schema the phase, restartCount and
// startTime are carriers (annotations), written first, and the conditions
// then go to the status subresource: a second request. committed reports
// whether the write that carries the phase and the count landed — the
// commit the events follow — even when the second then fails; a Failed
// condition lost that way is put back by Decide from the phase.
func PatchSet(ctx context.Context, c client.Client, cur, want *grovev1alpha1.PodCliqueSet) (committed bool, err error) {
	annotations := !equality.Semantic.DeepEqual(cur.Annotations, want.Annotations)
	if annotations {
		next := cur.DeepCopy()
		next.Annotations = want.Annotations
		if err := c.Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, fmt.Errorf("patching annotations of PodCliqueSet %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		committed, cur = true, next
	}
	if !equality.Semantic.DeepEqual(cur.Status, want.Status) {
		next := cur.DeepCopy()
		next.Status = want.Status
		if err := c.Status().Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return committed, fmt.Errorf("patching status of PodCliqueSet %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		committed = true
	}
	return committed, nil
}
