package trainjob

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// Trainer v2.3.0 no longer holds a runtime while TrainJobs use it: it keeps
// the runtime a job started on in a ConfigMap of the job's own
// (pkg/runtime/core/snapshot.go: <trainjob>-runtime-snapshot, data key
// "runtime", controller-owned by the TrainJob) and goes on reconciling the
// job from it after the runtime is deleted. shepherd reads the TTL from it
// in that one case: the runtime the job ran on still decides its TTL
// (KEP-2899), and a deleted runtime must not keep its finished jobs forever.
const (
	runtimeSnapshotSuffix = "-runtime-snapshot"
	runtimeSnapshotKey    = "runtime"
)

// Only this one GET, uncached: caching every ConfigMap of the cluster to
// read a few would cost memory in proportion to everything else stored.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// snapshotTTL reads the TTL of the runtime tj ran on from Trainer's
// snapshot of it, when its runtime is gone. nil when there is no snapshot,
// it is not tj's (another controller owner), or it sets no TTL; a malformed
// snapshot is logged and counts as none.
func (r *Reconciler) snapshotTTL(ctx context.Context, tj *trainerv1alpha1.TrainJob) (*RuntimeTTL, error) {
	if r.APIReader == nil {
		return nil, nil
	}
	log := ctrl.LoggerFrom(ctx)
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name + runtimeSnapshotSuffix}
	if err := r.APIReader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Trainer's runtime snapshot %s: %w", key, err)
	}
	if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != tj.UID {
		log.V(1).Info("runtime snapshot not this TrainJob's; no TTL from it", "configMap", key.Name)
		return nil, nil
	}
	rt, err := decodeSnapshot(cm.Data[runtimeSnapshotKey])
	if err != nil {
		log.Info("ignoring Trainer's runtime snapshot: its finished TrainJob is kept", "configMap", key.Name, "reason", err.Error())
		return nil, nil
	}
	ttl, err := trainer.RuntimeTTLOf(rt)
	if err != nil || ttl == nil {
		return nil, nil //nolint:nilerr // a malformed TTL is no TTL (runtimeTTL)
	}
	// The snapshot is the runtime as the job started with it: its TTL
	// counts from the job's finish.
	return &RuntimeTTL{Seconds: *ttl}, nil
}

// decodeSnapshot decodes the runtime a snapshot holds (YAML, as Trainer
// writes it).
func decodeSnapshot(data string) (*unstructured.Unstructured, error) {
	if data == "" {
		return nil, fmt.Errorf("no %q data", runtimeSnapshotKey)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(data), &u.Object); err != nil {
		return nil, fmt.Errorf("decoding the runtime: %w", err)
	}
	if u.Object == nil {
		return nil, fmt.Errorf("no runtime in %q", runtimeSnapshotKey)
	}
	return u, nil
}
