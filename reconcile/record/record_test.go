package record

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var tjGVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

// trainJob is team-a's TrainJob llama, of uid.
func trainJob(uid types.UID) *unstructured.Unstructured {
	return testkit.TrainJob("team-a", "llama", "torch", 0).UID(string(uid)).Obj()
}

func newClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := shepherdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
}

// The record of a workload is named after its kind and name, lives in its
// namespace, and is controlled by it (garbage collected with it, never
// blocking its deletion), naming it by UID.
func TestFor(t *testing.T) {
	if got := Name("PodCliqueSet", "serve"); got != "podcliqueset-serve" {
		t.Errorf("Name = %q, want podcliqueset-serve", got)
	}
	want := &shepherdv1alpha1.WorkloadRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: "shepherd.dev/v1alpha1", Kind: "WorkloadRecord"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "trainjob-llama", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "llama", UID: "uid-1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}}},
		Spec: shepherdv1alpha1.WorkloadRecordSpec{WorkloadRef: shepherdv1alpha1.WorkloadRef{
			APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "llama", UID: "uid-1",
		}},
	}
	if diff := cmp.Diff(want, For(trainJob("uid-1"), tjGVK)); diff != "" {
		t.Errorf("For (-want +got):\n%s", diff)
	}
}

// Get finds the workload's record, nothing when there is none or when the
// record there is of an earlier workload of the same name, and wraps any
// other error.
func TestGet(t *testing.T) {
	ctx := context.Background()
	stored := For(trainJob("uid-1"), tjGVK)
	stored.Status.Reason = "Kept"
	c := newClient(t, interceptor.Funcs{}, stored)

	rec, err := Get(ctx, c, "TrainJob", trainJob("uid-1"))
	if err != nil || rec == nil || rec.Status.Reason != "Kept" {
		t.Errorf("the workload's own record: %+v, %v", rec, err)
	}
	if rec, err := Get(ctx, c, "TrainJob", trainJob("uid-2")); err != nil || rec != nil {
		t.Errorf("another incarnation's record: %+v, %v; want none", rec, err)
	}
	if rec, err := Get(ctx, c, "PodCliqueSet", trainJob("uid-1")); err != nil || rec != nil {
		t.Errorf("no record of that kind: %+v, %v; want none", rec, err)
	}

	boom := errors.New("apiserver unavailable")
	failing := newClient(t, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return boom
	}})
	rec, err = Get(ctx, failing, "TrainJob", trainJob("uid-1"))
	if rec != nil || !errors.Is(err, boom) || err.Error() != "reading WorkloadRecord team-a/trainjob-llama: apiserver unavailable" {
		t.Errorf("a failed read: %+v, %v", rec, err)
	}
}

// Put creates the record when the decision saw none, and refuses when one
// appeared meanwhile; it replaces the record under the resourceVersion the
// decision read, and refuses when the record changed since.
func TestPut(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, interceptor.Funcs{})
	want := For(trainJob("uid-1"), tjGVK)
	want.Status.Phase = "Running"
	want.ResourceVersion = "999" // whatever the caller left there: a create sends none
	if err := Put(ctx, c, want, nil, "test"); err != nil {
		t.Fatalf("create: %v", err)
	}
	read, err := Get(ctx, c, "TrainJob", trainJob("uid-1"))
	if err != nil || read == nil || read.Status.Phase != "Running" {
		t.Fatalf("after the create: %+v, %v", read, err)
	}
	if err := Put(ctx, c, want, nil, "test"); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a create over an existing record: %v, want AlreadyExists", err)
	}

	next := read.DeepCopy()
	next.Status.Phase = "Succeeded"
	next.Status.Reason = "Done"
	next.ObjectMeta = metav1.ObjectMeta{Name: read.Name, Namespace: read.Namespace} // Put takes the metadata read
	if err := Put(ctx, c, next, read, "test"); err != nil {
		t.Fatalf("update: %v", err)
	}
	got, err := Get(ctx, c, "TrainJob", trainJob("uid-1"))
	if err != nil || got.Status.Phase != "Succeeded" || got.Status.Reason != "Done" || len(got.OwnerReferences) != 1 {
		t.Errorf("after the update: %+v, %v", got, err)
	}

	// read is now stale: its resourceVersion is not the stored one.
	stale := next.DeepCopy()
	stale.Status.Phase = "Failed"
	err = Put(ctx, c, stale, read, "test")
	if !apierrors.IsConflict(err) {
		t.Errorf("an update from a stale read: %v, want Conflict", err)
	}
	if got, _ := Get(ctx, c, "TrainJob", trainJob("uid-1")); got.Status.Phase != "Succeeded" {
		t.Errorf("a stale decision landed: phase %s", got.Status.Phase)
	}
}

// Apply server-side applies the part under its manager: it creates the
// record, and a later apply of the same manager removes the fields it no
// longer sets while another manager's stay.
func TestApply(t *testing.T) {
	ctx := context.Background()
	var sent []string // what each apply sends
	c := newClient(t, interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		sent = append(sent, string(b))
		return c.Apply(ctx, obj, opts...)
	}})
	part := For(trainJob("uid-1"), tjGVK)
	part.Status.Phase = "Running"
	part.Status.Reason = "Started"
	if err := Apply(ctx, c, part, "lifecycle"); err != nil {
		t.Fatalf("first apply: %v", err)
	}
	other := For(trainJob("uid-1"), tjGVK)
	other.Status.Message = "podgroups made"
	if err := Apply(ctx, c, other, "workload"); err != nil {
		t.Fatalf("the other manager's apply: %v", err)
	}
	part.Status.Reason = ""
	if err := Apply(ctx, c, part, "lifecycle"); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	got, err := Get(ctx, c, "TrainJob", trainJob("uid-1"))
	if err != nil || got == nil {
		t.Fatalf("the applied record: %+v, %v", got, err)
	}
	if got.Status.Phase != "Running" || got.Status.Reason != "" || got.Status.Message != "podgroups made" {
		t.Errorf("status %+v: want the phase kept, the reason the manager dropped removed, the other manager's message kept", got.Status)
	}
	for _, body := range sent {
		if strings.Contains(body, "creationTimestamp") {
			t.Errorf("an apply claims creationTimestamp: %s", body)
		}
	}
	if len(sent) != 3 {
		t.Errorf("%d applies sent, want 3", len(sent))
	}

	boom := errors.New("refused")
	failing := newClient(t, interceptor.Funcs{Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
		return boom
	}})
	if err := Apply(ctx, failing, part, "lifecycle"); !errors.Is(err, boom) || err.Error() != "applying WorkloadRecord team-a/trainjob-llama: refused" {
		t.Errorf("a refused apply: %v", err)
	}
}

// Only a record's deletion reaches the controllers that own parts of it.
func TestDeletedOnly(t *testing.T) {
	p := DeletedOnly()
	rec := For(trainJob("uid-1"), tjGVK)
	if p.Create(event.CreateEvent{Object: rec}) || p.Update(event.UpdateEvent{ObjectOld: rec, ObjectNew: rec}) || p.Generic(event.GenericEvent{Object: rec}) {
		t.Error("a create, update or generic event passes")
	}
	if !p.Delete(event.DeleteEvent{Object: rec}) {
		t.Error("a delete does not pass")
	}
}
