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
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// RecordManager is the field manager of an Inference PodCliqueSet's
// WorkloadRecord writes.
const RecordManager = "shepherd-gang"

// setReconciler runs gang termination for Inference PodCliqueSets: read the
// set, its PodCliques, scaling groups, pods and record; Decide; make the
// decision's one write; then its Events.
type setReconciler struct {
	client    client.Client
	deleter   *Deleter
	clock     clock.PassiveClock
	lifecycle *events.Lifecycle
	enf       *integrations.Enforcement
}

func (r *setReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pcs, err := grove.GetSet(ctx, r.client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	mode := r.enf.Setting(integrations.FeatureGangTermination)
	if pcs.DeletionTimestamp != nil || grove.IsTrainingSet(pcs) || mode == integrations.ModeOff {
		return ctrl.Result{}, nil
	}
	in := SetInput{Set: pcs, Mode: mode}
	if in.Cliques, err = grove.ListCliques(ctx, r.client, client.InNamespace(pcs.Namespace), client.MatchingFields{IndexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	if in.Groups, err = grove.ListGroups(ctx, r.client, client.InNamespace(pcs.Namespace), client.MatchingFields{IndexPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(pcs.Namespace), client.MatchingFields{IndexPodPartOf: pcs.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing pods of PodCliqueSet %s: %w", req.NamespacedName, err)
	}
	in.Pods = pods.Items
	rec, err := record.Get(ctx, r.client, api.KindPodCliqueSet, pcs.Served)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rec != nil {
		in.Record = &rec.Status
	}
	if m, why := GroveSign(in.Cliques, in.Groups); m != "" {
		// Reported for /status and the metric; the decision is the set's.
		r.enf.SetUpstream(integrations.FeatureGangTermination, true, why)
	}
	for i := range in.Groups {
		if _, err := GroupDelay(pcs, &in.Groups[i]); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "using the PodCliqueSet's terminationDelay", "podcliqueset", req.NamespacedName)
		}
	}
	return r.apply(ctx, pcs, rec, Decide(in, r.clock.Now()))
}

// apply makes the decision's one write. The record is guarded by the
// resourceVersion the decision read (or by create), each deletion by the
// PodClique's UID; a write that loses a race is decided again from a fresh
// read.
func (r *setReconciler) apply(ctx context.Context, pcs *grove.Set, rec *shepherdv1alpha1.WorkloadRecord, d SetDecision) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("podcliqueset", client.ObjectKeyFromObject(pcs.Served))
	for _, b := range d.LeftToGrove {
		log.V(1).Info("expired breach left to Grove (setting on; Grove terminates it no later)", "breach", b.String())
	}
	switch d.Write {
	case WriteRecord:
		want := record.For(pcs.Served, pcs.Served.GroupVersionKind())
		want.Status = d.Status
		if err := record.Put(ctx, r.client, want, rec, RecordManager); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
				return result(conflictRetry), nil
			}
			return ctrl.Result{}, err
		}
	case WriteTerminate:
		for _, t := range d.Terminate {
			if err := r.terminate(ctx, pcs, t); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return result(d.RequeueAfter), nil
}

// terminate deletes one gang: the Event first (events.Lifecycle), keyed by
// the gang and the moment its delay expired, so a leader killed after the
// deletion leaves its successor nothing to record twice.
func (r *setReconciler) terminate(ctx context.Context, pcs *grove.Set, t Termination) error {
	var regarding client.Object = pcs.Served
	key := fmt.Sprintf("replica-%d/%s", t.Replica, t.ExpiredAt().UTC().Format(time.RFC3339Nano))
	note := fmt.Sprintf("%s; deleted replica %d's PodCliques %v", t.Breach, t.Replica, names(t.Victims))
	if t.Level == LevelPCSG {
		g := grove.NewObject(api.KindPodCliqueScalingGroup)
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: pcs.Namespace, Name: t.Group}, g); err == nil {
			regarding = g
		}
		key = t.Group + "/" + key
		note = fmt.Sprintf("replica %d of PodCliqueScalingGroup %s breached MinAvailable past its terminationDelay (%s); deleted its PodCliques %v", t.Replica, t.Group, t.Breach.Delay, names(t.Victims))
	}
	if err := r.lifecycle.Record(ctx, regarding, corev1.EventTypeWarning, api.EventGangTerminated, "Terminate", key, note); err != nil {
		return err
	}
	n, err := DeleteAllExact(ctx, r.deleter, served(t.Victims))
	if err != nil || n == 0 {
		return err // n == 0: an earlier reconcile did it; the cache lags
	}
	terminations.WithLabelValues(t.Level).Inc()
	terminationLag.WithLabelValues(t.Level).Observe(r.clock.Since(t.ExpiredAt()).Seconds())
	ctrl.LoggerFrom(ctx).Info("gang-terminated", "podcliqueset", client.ObjectKeyFromObject(pcs.Served), "level", t.Level, "group", t.Group, "replica", t.Replica, "breach", t.Breach.String(), "podcliques", names(t.Victims))
	return nil
}

func names(cs []*grove.Clique) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// served names each PodClique by its object as served: the deletes need
// its kind, which the published type (a plain struct) cannot give.
func served(cs []*grove.Clique) []client.Object {
	out := make([]client.Object, len(cs))
	for i, c := range cs {
		out[i] = c.Served
	}
	return out
}
