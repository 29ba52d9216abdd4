// Package runtimes maps Kubeflow training runtimes to the TrainJobs that
// reference them. Both TrainJob controllers need it: a TTL added to a runtime
// must reach its finished jobs, and a runtime created (or given
// podGroupPolicy.workload) after its TrainJobs must reach them too. They share
// one field index on the manager's cache and one map function.
package runtimes

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// index indexes TrainJobs by trainerv1alpha1.RuntimeIndexKey of their runtime.
const index = "shepherd.dev/trainjob-runtime"

// indexed remembers the field indexers the index is registered with: a
// controller-runtime indexer refuses the same index twice, and each
// controller registers it from its own Setup so it also works alone in tests.
var indexed sync.Map

// Index registers the TrainJob-by-runtime index with mgr, once per manager.
func Index(mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if _, done := indexed.LoadOrStore(idx, true); done {
		return nil
	}
	err := idx.IndexField(context.Background(), &trainerv1alpha1.TrainJob{}, index, func(o client.Object) []string {
		tj := o.(*trainerv1alpha1.TrainJob)
		if k, ok := tj.Spec.RuntimeRef.IndexKey(tj.Namespace); ok {
			return []string{k}
		}
		return nil
	})
	if err != nil {
		indexed.Delete(idx)
		return fmt.Errorf("indexing TrainJobs by runtime: %w", err)
	}
	return nil
}

// JobsOf returns a map function from a TrainingRuntime or
// ClusterTrainingRuntime to reconcile requests for the TrainJobs referencing
// it, read through c (which must be backed by a cache carrying Index).
func JobsOf(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var key string
		var opts []client.ListOption
		kind, _ := trainer.RuntimeKind(o)
		switch kind {
		case api.KindClusterTrainingRuntime:
			key = trainerv1alpha1.RuntimeIndexKey(kind, "", o.GetName())
		case api.KindTrainingRuntime:
			key = trainerv1alpha1.RuntimeIndexKey(kind, o.GetNamespace(), o.GetName())
			opts = append(opts, client.InNamespace(o.GetNamespace()))
		default:
			return nil
		}
		var jobs trainerv1alpha1.TrainJobList
		if err := c.List(ctx, &jobs, append(opts, client.MatchingFields{index: key})...); err != nil {
			// A map function cannot return an error; the next resync or
			// runtime change retries.
			ctrl.LoggerFrom(ctx).Error(err, "listing the TrainJobs of a runtime", "runtime", key)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(jobs.Items))
		for i := range jobs.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&jobs.Items[i])})
		}
		return reqs
	}
}

// Get reads the runtime tj references through c, as served (unstructured:
// trainer.NewRuntime), whose knobs integrations/trainer reads (RuntimeTTLOf,
// UsesWorkload) and whose JobSet template trainer.RuntimeJobs returns. It returns nil, without error,
// when the runtime does not exist yet (the runtime watch brings the job
// back once it does) or the reference is not to a Trainer runtime.
func Get(ctx context.Context, c client.Reader, tj *trainerv1alpha1.TrainJob) (*unstructured.Unstructured, error) {
	ref := tj.Spec.RuntimeRef
	if !ref.IsTrainerRuntime() {
		return nil, nil
	}
	key := types.NamespacedName{Name: ref.Name}
	switch ref.EffectiveKind() {
	case api.KindClusterTrainingRuntime:
	case api.KindTrainingRuntime:
		key.Namespace = tj.Namespace
	default:
		return nil, nil
	}
	rt := trainer.NewRuntime(ref.EffectiveKind())
	err := c.Get(ctx, key, rt)
	if apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).V(1).Info("runtime not found; waiting for it", "kind", ref.EffectiveKind(), "runtime", ref.Name)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %q: %w", ref.EffectiveKind(), ref.Name, err)
	}
	return rt, nil
}
