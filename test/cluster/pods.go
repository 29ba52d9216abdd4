package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// SetPodStatus plays the kubelet where no kubelet (nor kwok) runs: it
// reads pod p, changes its status with mutate and writes it back, again on
// a conflict (a controller wrote the pod meanwhile), and leaves the pod as
// written in p. Any other failure fails t.
func SetPodStatus(t testing.TB, c client.Client, p *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	var failed error
	if err := testkit.Poll(50*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		var cur corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			failed = err
			return true, nil
		}
		mutate(&cur.Status)
		if err := c.Status().Update(ctx, &cur); err != nil {
			if apierrors.IsConflict(err) {
				return false, err
			}
			failed = err
			return true, nil
		}
		cur.DeepCopyInto(p)
		return true, nil
	}); err != nil || failed != nil {
		t.Fatalf("writing the status of pod %s/%s: %v", p.Namespace, p.Name, errors.Join(err, failed))
	}
}
