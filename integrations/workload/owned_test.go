package workload

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
)

func req(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
}

func TestControlledBy(t *testing.T) {
	tj := trainJob(nil)
	wl := BuildWorkload(tj, Plan{Templates: []GroupTemplate{{Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: 2}}}, "v1beta1")
	if !ControlledBy(wl, tj.UID) {
		t.Errorf("the Workload built for the TrainJob is not controlled by it")
	}
	if ControlledBy(wl, "uid-of-an-earlier-job") {
		t.Errorf("ControlledBy matched another uid: the name must not decide ownership")
	}
	pg := BuildPodGroup(tj, GroupTemplate{Name: api.PodGroupTemplateTrainer}, "v1beta1", wl.GetName(), "wl-uid")
	if !ControlledBy(pg, tj.UID) {
		t.Errorf("the PodGroup is not controlled by the TrainJob (its Workload owner is not the controller)")
	}
	// A user's Workload of the same name: an owner that is not the
	// controller, or none at all.
	mine := wl.DeepCopy()
	mine.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: tj.UID}})
	if ControlledBy(mine, tj.UID) {
		t.Errorf("a non-controller ownerReference counted as control")
	}
	mine.SetOwnerReferences(nil)
	if ControlledBy(mine, tj.UID) {
		t.Errorf("an object without owners counted as controlled")
	}
}

func TestForeignMessage(t *testing.T) {
	old := trainJob(nil)
	old.UID = "old-uid"
	wl := BuildWorkload(old, Plan{}, "v1beta1")
	msg := ForeignMessage(wl)
	for _, want := range []string{"Workload ns/my-job", "controller TrainJob my-job (uid old-uid)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	wl.SetOwnerReferences(nil)
	if msg := ForeignMessage(wl); !strings.Contains(msg, "no controller") {
		t.Errorf("message %q for an unowned Workload does not say so", msg)
	}
}

func TestTrainJobsFor(t *testing.T) {
	tj := trainJob(nil)
	wl := BuildWorkload(tj, Plan{}, "v1beta1")
	pg := BuildPodGroup(tj, GroupTemplate{Name: api.PodGroupTemplateTrainer}, "v1beta1", wl.GetName(), "wl-uid")

	userWorkload := wl.DeepCopy()
	userWorkload.SetOwnerReferences(nil)
	otherOwner := wl.DeepCopy()
	otherOwner.SetName("renamed")
	strayPodGroup := pg.DeepCopy()
	strayPodGroup.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "u", Controller: ptr.To(true)}})
	// A TrainJob-kind owner of another group is not a TrainJob.
	otherGroup := pg.DeepCopy()
	otherGroup.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: api.KindTrainJob, Name: "x", UID: "u", Controller: ptr.To(true)}})

	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want []reconcile.Request
	}{
		{"PodGroup: its controlling TrainJob", pg, []reconcile.Request{req("my-job")}},
		{"Workload: its controller, once", wl, []reconcile.Request{req("my-job")}},
		{"unowned Workload: the TrainJob of its name", userWorkload, []reconcile.Request{req("my-job")}},
		{"Workload named otherwise: controller and name", otherOwner, []reconcile.Request{req("my-job"), req("renamed")}},
		{"PodGroup controlled by something else", strayPodGroup, nil},
		{"PodGroup controlled by another group's TrainJob", otherGroup, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, TrainJobsFor(tc.obj)); diff != "" {
				t.Errorf("TrainJobsFor (-want +got):\n%s", diff)
			}
		})
	}
}

// Only a deletion leaves something to (re)create: creations are shepherd's
// own, status updates the scheduler's, and reacting to them would reconcile
// every TrainJob at each scheduling pass.
func TestOwnedGone(t *testing.T) {
	p := OwnedGone()
	pg := BuildPodGroup(trainJob(nil), GroupTemplate{Name: api.PodGroupTemplateTrainer}, "v1beta1", "my-job", "wl-uid")
	if p.Create(event.CreateEvent{Object: pg}) {
		t.Errorf("a creation passes")
	}
	if p.Update(event.UpdateEvent{ObjectOld: pg, ObjectNew: pg}) {
		t.Errorf("an update passes")
	}
	if p.Generic(event.GenericEvent{Object: pg}) {
		t.Errorf("a generic event passes")
	}
	if !p.Delete(event.DeleteEvent{Object: pg}) {
		t.Errorf("a deletion does not pass")
	}
}

// A runtime change does not retro-apply (package doc): what decides whether
// to write is ownership alone, never whether the existing object matches
// what the runtime would give today. An owned Workload built from an older
// plan is the TrainJob's, to be kept as it is.
func TestChangedRuntimeKeepsOwnedWorkload(t *testing.T) {
	tj := trainJob(ptr.To[int32](2))
	before := BuildWorkload(tj, Plan{Templates: []GroupTemplate{{Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: 2}}}, "v1beta1")
	now := BuildWorkload(tj, Plan{Templates: []GroupTemplate{{Name: api.PodGroupTemplateTrainer, Gang: true, MinCount: 8}}}, "v1beta1")
	if cmp.Equal(before.Object, now.Object) {
		t.Fatalf("the plans should differ")
	}
	if !ControlledBy(before, tj.UID) {
		t.Errorf("the Workload of the older plan is not the TrainJob's: it would be reported foreign instead of kept")
	}
}
