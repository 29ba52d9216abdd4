package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// cliqueReconciler keeps a PodClique's readyReplicas, wasAvailable and
// MinAvailableBreached.
type cliqueReconciler struct {
	client  client.Client
	clock   clock.PassiveClock
	gate    *Gate
	schemas knob.FieldSchemas
}

func (r *cliqueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var pclq grovev1alpha1.PodClique
	if err := r.client.Get(ctx, req.NamespacedName, &pclq); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if Terminating(&pclq) {
		return ctrl.Result{}, nil // its status no longer matters (Terminating)
	}
	if !r.gate.Acts(api.KindPodClique, &pclq, pclq.Status.Conditions) {
		return ctrl.Result{}, nil // Grove keeps this status itself
	}
	pcs, err := ParentSet(ctx, r.client, &pclq)
	if err != nil {
		return ctrl.Result{}, err
	}
	if grove.IsTrainingSet(pcs) {
		// A Training set's breaches are package training's, read from the
		// pods and answered by a restart; shepherd writes nothing to its
		// PodCliques.
		return ctrl.Result{}, nil
	}
	pods, err := OwnedPods(ctx, r.client, IndexPodOwner, &pclq)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := DecideCliqueStatus(r.clock, CliqueInput{Clique: &pclq, Pods: pods})
	wrote, err := PatchClique(ctx, r.client, &pclq, st.Apply(&pclq, true, r.schemas))
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return result(conflictRetry), nil
		}
		return ctrl.Result{}, err
	}
	if wrote {
		log.V(1).Info("PodClique status", "podclique", req.NamespacedName, "readyReplicas", st.ReadyReplicas, "wasAvailable", st.WasAvailable)
	}
	return ctrl.Result{}, nil
}

// groupReconciler keeps a PCSG's availableReplicas and MinAvailableBreached
// and terminates its expired breached replicas.
type groupReconciler struct {
	client    client.Client
	deleter   *Deleter
	clock     clock.PassiveClock
	lifecycle *events.Lifecycle
	gate      *Gate
}

func (r *groupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var g grovev1alpha1.PodCliqueScalingGroup
	if err := r.client.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if g.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	var list grovev1alpha1.PodCliqueList
	if err := r.client.List(ctx, &list, client.InNamespace(g.Namespace), client.MatchingLabels{api.LabelPodCliqueScalingGroup: g.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliques of PodCliqueScalingGroup %s: %w", req.NamespacedName, err)
	}
	r.gate.Observe(api.KindPodCliqueScalingGroup, &g, g.Status.Conditions)
	for i := range list.Items {
		r.gate.Observe(api.KindPodClique, &list.Items[i], list.Items[i].Status.Conditions)
	}
	if !r.gate.Enforces() {
		return ctrl.Result{}, nil // Grove keeps this status and terminates itself
	}
	pcs, err := ParentSet(ctx, r.client, &g)
	if err != nil {
		return ctrl.Result{}, err
	}
	if grove.IsTrainingSet(pcs) {
		return ctrl.Result{}, nil // package training's (see the clique reconciler)
	}
	in := GroupInput{Group: &g, Cliques: list.Items}
	if pcs != nil {
		if in.Delay, err = GroupDelay(pcs, &g); err != nil {
			log.Error(err, "using the PodCliqueSet's terminationDelay", "podcliquescalinggroup", req.NamespacedName)
		}
	}
	d := DecideGroup(r.clock, in)
	if d.Changed(&g) {
		orig := g.DeepCopy()
		g.Status.AvailableReplicas, g.Status.Conditions = d.AvailableReplicas, d.Conditions
		if err := r.client.Status().Patch(ctx, &g, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return result(conflictRetry), nil
			}
			return ctrl.Result{}, fmt.Errorf("patching status of PodCliqueScalingGroup %s: %w", req.NamespacedName, err)
		}
	}
	for _, idx := range d.Terminate {
		var victims []*grovev1alpha1.PodClique
		var gone []string
		for i := range list.Items {
			c := &list.Items[i]
			if PCSGReplicaIndex(c.Labels) == idx && !Terminating(c) {
				victims = append(victims, c)
				gone = append(gone, c.Name)
			}
		}
		if len(victims) == 0 {
			continue
		}
		// The Event first (events.Lifecycle): a leader killed after the
		// delete would leave its successor nothing to do or record. The
		// key is the replica and the moment its delay expired: one Event
		// per termination, whichever leader makes it.
		if err := r.lifecycle.Record(ctx, &g, corev1.EventTypeWarning, api.EventGangTerminated, "Terminate",
			fmt.Sprintf("replica-%d/%s", idx, d.ExpiredAt[idx].UTC().Format(time.RFC3339Nano)),
			fmt.Sprintf("replica %d breached MinAvailable past its terminationDelay; deleted its PodCliques %v", idx, gone)); err != nil {
			return ctrl.Result{}, err
		}
		n, err := DeleteAllExact(ctx, r.deleter, victims)
		if err != nil {
			return ctrl.Result{}, err
		}
		if n == 0 {
			continue // an earlier reconcile did it; the cache lags
		}
		terminations.WithLabelValues(LevelPCSG).Inc()
		terminationLag.WithLabelValues(LevelPCSG).Observe(r.clock.Since(d.ExpiredAt[idx]).Seconds())
		log.Info("gang-terminated PodCliqueScalingGroup replica", "podcliquescalinggroup", req.NamespacedName, "replica", idx, "podcliques", gone)
	}
	return result(d.RequeueAfter), nil
}

// setReconciler terminates PodCliqueSet replicas whose breach expired.
type setReconciler struct {
	client    client.Client
	deleter   *Deleter
	clock     clock.PassiveClock
	lifecycle *events.Lifecycle
	gate      *Gate
}

func (r *setReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var pcs grovev1alpha1.PodCliqueSet
	if err := r.client.Get(ctx, req.NamespacedName, &pcs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pcs.DeletionTimestamp != nil || pcs.Spec.Template.TerminationDelay == nil || grove.IsTrainingSet(&pcs) || !r.gate.Enforces() {
		return ctrl.Result{}, nil
	}
	var cliques grovev1alpha1.PodCliqueList
	if err := r.client.List(ctx, &cliques, client.InNamespace(pcs.Namespace), client.MatchingFields{IndexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliques of PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	var groups grovev1alpha1.PodCliqueScalingGroupList
	if err := r.client.List(ctx, &groups, client.InNamespace(pcs.Namespace), client.MatchingFields{IndexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing PodCliqueScalingGroups of PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	for i := range cliques.Items {
		r.gate.Observe(api.KindPodClique, &cliques.Items[i], cliques.Items[i].Status.Conditions)
	}
	for i := range groups.Items {
		r.gate.Observe(api.KindPodCliqueScalingGroup, &groups.Items[i], groups.Items[i].Status.Conditions)
	}
	if !r.gate.Enforces() {
		return ctrl.Result{}, nil // Grove terminates this set's gangs itself
	}
	// Every PodClique goes to the decision, which judges those being
	// deleted by Terminating (as the PCSG level does); only live ones are
	// deleted.
	d := DecideSet(r.clock, SetInput{Set: &pcs, Cliques: cliques.Items, Groups: groups.Items})
	for _, b := range d.Terminate {
		var victims []*grovev1alpha1.PodClique
		var gone []string
		for i := range cliques.Items {
			if c := &cliques.Items[i]; PCSReplicaIndex(c.Labels) == b.Replica && !Terminating(c) {
				victims = append(victims, c)
				gone = append(gone, c.Name)
			}
		}
		if len(victims) == 0 {
			continue
		}
		// The Event first, keyed by replica and breach (as above).
		if err := r.lifecycle.Record(ctx, &pcs, corev1.EventTypeWarning, api.EventGangTerminated, "Terminate",
			fmt.Sprintf("replica-%d/%s", b.Replica, b.Since.UTC().Format(time.RFC3339Nano)),
			fmt.Sprintf("%s; deleted replica %d's PodCliques %v", b, b.Replica, gone)); err != nil {
			return ctrl.Result{}, err
		}
		n, err := DeleteAllExact(ctx, r.deleter, victims)
		if err != nil {
			return ctrl.Result{}, err
		}
		if n == 0 {
			continue // an earlier reconcile did it; the cache lags
		}
		terminations.WithLabelValues(LevelPCS).Inc()
		terminationLag.WithLabelValues(LevelPCS).Observe(r.clock.Since(b.Since.Add(b.Delay)).Seconds())
		log.Info("gang-terminated PodCliqueSet replica", "podcliqueset", req.NamespacedName, "replica", b.Replica, "breach", b.String(), "podcliques", gone)
	}
	return result(d.RequeueAfter), nil
}
