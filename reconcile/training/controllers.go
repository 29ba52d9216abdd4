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
	want := pclq.DeepCopy()
	// The pods the last restart replaced never count toward Succeeded, even
	// once its marker is done while they still linger in Terminating.
	last, _ := gang.Marker(pclq.Annotations)
	conds, succeeded := DecideCliqueSucceeded(r.clock, &pclq, pods, last)
	want.Status.Conditions = conds
	// The restart gate: package gang's availability rule, kept here for
	// Training cliques whatever enforces gang termination (see the package
	// doc).
	a := gang.CliqueAvailability(gang.CliqueInput{Clique: &pclq, Pods: pods, Training: true, Marker: marker})
	grove.SetWasAvailable(want, a.WasAvailable, r.schemas)
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
	log := ctrl.LoggerFrom(ctx).WithValues("podcliqueset", req.NamespacedName)
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
	if wrote, err := PatchSet(ctx, r.client, &pcs, d.Status.Apply(&pcs, r.schemas)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Nothing after the commit may happen without it; the
			// markers already written make the next reconcile resume.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	} else if wrote {
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

// PatchSet writes what want changes on the PodCliqueSet cur: first its
// annotations (the Training status carriers on Grove's schema), with a
// merge patch of the object, then its status, with a merge patch of the
// status subresource — each only if it changed, each with an optimistic
// lock, so that a restart is counted once whichever form holds the count.
// On Grove's schema the carriers go first: the phase is the commit, and a
// Failed condition lost after it (a crash, or Grove rewriting its
// conditions list) is put back by Decide from the phase.
func PatchSet(ctx context.Context, c client.Client, cur, want *grovev1alpha1.PodCliqueSet) (wrote bool, err error) {
	if !equality.Semantic.DeepEqual(cur.Annotations, want.Annotations) {
		next := cur.DeepCopy()
		next.Annotations = want.Annotations
		if err := c.Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return wrote, fmt.Errorf("patching annotations of PodCliqueSet %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		wrote, cur = true, next
	}
	if !equality.Semantic.DeepEqual(cur.Status, want.Status) {
		next := cur.DeepCopy()
		next.Status = want.Status
		if err := c.Status().Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return wrote, fmt.Errorf("patching status of PodCliqueSet %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		wrote = true
	}
	return wrote, nil
}
