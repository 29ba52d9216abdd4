package workload

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// ControlledBy reports whether o's controller ownerReference is to the
// object with uid — ownership, not the name, decides whose object it is.
func ControlledBy(o metav1.Object, uid types.UID) bool {
	owner := metav1.GetControllerOfNoCopy(o)
	return owner != nil && owner.UID == uid
}

// ForeignMessage explains why o, existing and not controlled by the
// TrainJob it is named for, blocks that TrainJob's gang scheduling.
func ForeignMessage(o client.Object) string {
	who := "no controller"
	if owner := metav1.GetControllerOfNoCopy(o); owner != nil {
		who = fmt.Sprintf("controller %s %s (uid %s)", owner.Kind, owner.Name, owner.UID)
	}
	return fmt.Sprintf("%s %s/%s exists with %s, not this TrainJob: its pods cannot join a PodGroup of their own "+
		"until it is deleted (the garbage collector removes one left by an earlier TrainJob of the same name)",
		o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), who)
}

// trainJobKind is the group and kind of a controller ownerReference to a
// TrainJob.
var trainJobKind = schema.GroupKind{Group: trainerv1alpha1.GroupVersion.Group, Kind: api.KindTrainJob}

// TrainJobsFor maps a Workload or PodGroup to the TrainJob to reconcile:
// the one its controller ownerReference names, and for a Workload also the
// TrainJob of its name (a Workload is named after its TrainJob, so a
// foreign Workload's deletion unblocks that job).
func TrainJobsFor(o client.Object) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	add := func(name string) {
		if name == "" || seen[name] {
			return
		}
		seen[name] = true
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}})
	}
	if owner := metav1.GetControllerOfNoCopy(o); owner != nil {
		if gv, err := schema.ParseGroupVersion(owner.APIVersion); err == nil &&
			(schema.GroupKind{Group: gv.Group, Kind: owner.Kind}) == trainJobKind {
			add(owner.Name)
		}
	}
	if o.GetObjectKind().GroupVersionKind().Kind == api.KindWorkload {
		add(o.GetName())
	}
	return out
}

// OwnedGone lets only deletions of Workloads and PodGroups through: their
// creation is shepherd's own doing and their status is the scheduler's;
// only a deletion leaves something to recreate (or, for a foreign
// Workload, something to create at last).
func OwnedGone() predicate.Predicate { return record.DeletedOnly() }
