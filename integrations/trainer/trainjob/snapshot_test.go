package trainjob

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestSnapshotTTL: the TTL of a finished job whose runtime is gone comes
// from Trainer's snapshot of that runtime — only a snapshot the job
// controls, and only a well-formed TTL.
func TestSnapshotTTL(t *testing.T) {
	const withTTL = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch
  annotations:
    shepherd.dev/ttl-seconds-after-finished: "30"
spec: {}
`
	snapshot := func(owner string, data string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "j-runtime-snapshot"}, Data: map[string]string{"runtime": data}}
		if owner != "" {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "j", UID: "uid-1", Controller: ptr.To(owner == "job")}}
			if owner == "other" {
				cm.OwnerReferences[0].UID = "uid-2"
				cm.OwnerReferences[0].Controller = ptr.To(true)
			}
		}
		return cm
	}
	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
		want *RuntimeTTL
	}{
		{name: "the job's snapshot", cm: snapshot("job", withTTL), want: &RuntimeTTL{Seconds: 30}},
		{name: "no snapshot"},
		{name: "another job's snapshot", cm: snapshot("other", withTTL)},
		{name: "owned but not controlled", cm: snapshot("owner", withTTL)},
		{name: "no TTL in the runtime", cm: snapshot("job", "kind: ClusterTrainingRuntime\nmetadata: {name: torch}\n")},
		{name: "malformed TTL", cm: snapshot("job", "metadata: {annotations: {shepherd.dev/ttl-seconds-after-finished: 1h}}\n")},
		{name: "not YAML", cm: snapshot("job", "{")},
		{name: "empty", cm: snapshot("job", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := corev1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.cm != nil {
				b = b.WithObjects(tc.cm)
			}
			r := &Reconciler{APIReader: b.Build()}
			got, err := r.snapshotTTL(context.Background(), job())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("snapshotTTL (-want +got):\n%s", diff)
			}
		})
	}
}
