package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// TestStripManagedFields: the cache holds objects without managedFields,
// except the kinds whose managedFields a decision reads (the runtimes'
// TTL, the Grove gang's MinAvailableBreached owner).
func TestStripManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	meta := func() metav1.ObjectMeta { return metav1.ObjectMeta{Name: "x", ManagedFields: managed} }
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload"}}
	u.SetManagedFields(managed)
	for _, tc := range []struct {
		obj  metav1.Object
		keep bool
	}{
		{&trainerv1alpha1.TrainJob{ObjectMeta: meta()}, false},
		{&corev1.Pod{ObjectMeta: meta()}, false},
		{&grovev1alpha1.PodCliqueSet{ObjectMeta: meta()}, false},
		{u, false},
		{&trainerv1alpha1.TrainingRuntime{ObjectMeta: meta()}, true},
		{&trainerv1alpha1.ClusterTrainingRuntime{ObjectMeta: meta()}, true},
		{&grovev1alpha1.PodClique{ObjectMeta: meta()}, true},
		{&grovev1alpha1.PodCliqueScalingGroup{ObjectMeta: meta()}, true},
	} {
		out, err := stripManagedFields()(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(out.(metav1.Object).GetManagedFields()) > 0; kept != tc.keep {
			t.Errorf("%T: managedFields kept = %v, want %v", tc.obj, kept, tc.keep)
		}
	}
}
