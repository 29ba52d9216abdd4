package training

import (
	"context"
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
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// setReconciler runs the lifecycle of Training PodCliqueSets.
type setReconciler struct {
	client   client.Client
	deleter  *gang.Deleter
	clock    clock.PassiveClock
	recorder recorder.EventRecorder
}

func (r *setReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pcs, err := grove.GetSet(ctx, r.client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pcs.DeletionTimestamp != nil || !grove.IsTrainingSet(pcs) {
		return ctrl.Result{}, nil
	}
	maxRestarts, maxRuntime, err := grove.TrainingLimits(pcs)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("trainingSpec of PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	in := Input{Set: pcs, MaxRuntime: maxRuntime}
	if maxRestarts != nil {
		in.MaxRestarts = *maxRestarts
	}
	cliques, err := grove.ListCliques(ctx, r.client, client.InNamespace(pcs.Namespace), client.MatchingFields{indexPartOf: pcs.Name})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	for i := range cliques {
		if !gang.Terminating(&cliques[i]) {
			in.Cliques = append(in.Cliques, cliques[i])
		}
	}
	if in.Groups, err = grove.ListGroups(ctx, r.client, client.InNamespace(pcs.Namespace), client.MatchingLabels{api.LabelPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pcs.Namespace), client.MatchingFields{indexPodPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing pods of %s: %w", req.NamespacedName, err)
	}
	in.Pods = pods.Items
	rec, err := record.Get(ctx, r.client, api.KindPodCliqueSet, pcs.Served)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rec != nil {
		in.State = StateOf(rec)
	} else {
		// No record yet: a new set, or one an earlier shepherd kept on
		// the objects. A carrier that does not parse is reported (the
		// error is logged and retried with backoff) and nothing is done:
		// guessing a restart count could restart, or fail, a workload
		// wrongly.
		if in.State, err = Upgrade(in); err != nil {
			return ctrl.Result{}, err
		}
		in.Unrecorded = true
	}
	return r.apply(ctx, pcs, rec, in.Cliques, Decide(r.clock, in))
}

// apply makes the decision's one write, then — once a status write has
// landed — its events and metrics. Every write is guarded: the record by
// the resourceVersion the decision read (or, for its first write, by
// create), the deletes by UID preconditions, the scale-downs by UID; a
// write that loses a race is not retried as is but decided again from a
// fresh read.
func (r *setReconciler) apply(ctx context.Context, pcs *grove.Set, rec *shepherdv1alpha1.WorkloadRecord, cliques []grove.Clique, d Decision) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("podcliqueset", client.ObjectKeyFromObject(pcs.Served))
	switch d.Write {
	case WriteStatus, WriteMarker, WriteCliques:
		if err := record.Put(ctx, r.client, d.State.Record(pcs), rec, RecordManager); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, err
		}
		if d.Write == WriteStatus {
			log.Info("Training status", "phase", d.State.Phase, "restartCount", d.State.RestartCount)
			r.record(pcs, cliques, d)
		}
	case WriteDelete:
		victims := make([]*corev1.Pod, 0, len(d.Delete))
		for _, p := range d.Delete {
			victims = append(victims, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pcs.Namespace, Name: p.Name, UID: p.UID}})
		}
		if _, err := gang.DeleteAllExact(ctx, r.deleter, victims); err != nil {
			return ctrl.Result{}, err
		}
	case WriteScale:
		for _, c := range d.Scale {
			if err := r.scaleDown(ctx, pcs.Namespace, c); err != nil {
				return ctrl.Result{}, err
			}
		}
		log.Info("failed Training set: PodCliques scaled to 0 replicas", "podcliques", len(d.Scale))
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// scaleDown sets a PodClique's replicas to 0 — a merge patch of
// spec.replicas carrying the UID the decision read, so a PodClique created
// again under the name is not scaled by mistake.
func (r *setReconciler) scaleDown(ctx context.Context, ns string, c PodRef) error {
	body := fmt.Appendf(nil, `{"metadata":{"uid":%q},"spec":{"replicas":0}}`, c.UID)
	pclq := grove.NewObject(api.KindPodClique)
	pclq.SetNamespace(ns)
	pclq.SetName(c.Name)
	if err := r.client.Patch(ctx, pclq, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("scaling PodClique %s/%s of a failed Training set to 0: %w", ns, c.Name, err)
	}
	return nil
}

// record emits a committed decision's events and counts its metrics.
func (r *setReconciler) record(pcs *grove.Set, cliques []grove.Clique, d Decision) {
	for _, e := range d.Events {
		var regarding client.Object = pcs.Served
		if c := findClique(cliques, e.Clique); c != nil {
			regarding = c.Served
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

func findClique(cliques []grove.Clique, name string) *grove.Clique {
	for i := range cliques {
		if name != "" && cliques[i].Name == name {
			return &cliques[i]
		}
	}
	return nil
}
