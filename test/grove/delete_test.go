package grove

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

// TestDeleterSparesRecreatedObjects deletes through the metadata API with a
// UID precondition: an object recreated under the same name since it was
// read is left alone and reported as not deleted; the current object is
// deleted and reported; deleting what is already gone is no error. PodCliques
// (a CRD, answered in JSON) and Pods (built in, answered in protobuf) both.
func TestDeleterSparesRecreatedObjects(t *testing.T) {
	w := newWorld(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: install.NewScheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := gang.NewDeleter(mgr)
	if err != nil {
		t.Fatal(err)
	}
	// A PodClique as the controllers hold it: as served (grove.Clique).
	clique := func() client.Object {
		return grove.CliqueOf(&grovev1alpha1.PodClique{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "c"},
			Spec: grovev1alpha1.PodCliqueSpec{RoleName: "main", Replicas: 1, PodSpec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "trainer:latest"}},
			}},
		}).Served
	}
	pod := func() client.Object {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "p"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "trainer:latest"}}},
		}
	}
	for name, fresh := range map[string]func() client.Object{"PodClique": clique, "Pod": pod} {
		t.Run(name, func(t *testing.T) {
			stale := fresh()
			if err := w.c.Create(w.ctx, stale); err != nil {
				t.Fatal(err)
			}
			if err := w.c.Delete(w.ctx, fresh(), client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			current := fresh()
			if err := w.c.Create(w.ctx, current); err != nil {
				t.Fatal(err)
			}

			deleted, err := d.Exact(w.ctx, stale)
			if err != nil || deleted {
				t.Fatalf("deleting the stale object: deleted %v, err %v; want false, nil", deleted, err)
			}
			if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(current), fresh()); err != nil {
				t.Fatalf("the recreated object is gone: %v", err)
			}

			n, err := gang.DeleteAllExact(w.ctx, d, []client.Object{current, stale})
			if err != nil || n != 1 {
				t.Fatalf("deleting current and stale: deleted %d, err %v; want 1, nil", n, err)
			}
			if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(current), fresh()); !apierrors.IsNotFound(err) {
				t.Fatalf("after deleting the current object, get: %v; want NotFound", err)
			}
			if deleted, err := d.Exact(w.ctx, current); err != nil || deleted {
				t.Fatalf("deleting it again: deleted %v, err %v; want false, nil", deleted, err)
			}
		})
	}
}
