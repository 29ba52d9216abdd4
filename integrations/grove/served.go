package grove

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// Grove's objects as shepherd's controllers read them. Each is read
// unstructured, as the cluster serves it, and carries two views: Grove's
// published fields decoded into api/grove/v1alpha1 (embedded, for the
// decisions), and the object as served (Served), which the accessors of
// accessors.go read the seed fields from — a seed field on a cluster whose
// CRD has it, else its carrier annotation. A typed read would drop every
// seed field the published type lacks, so api/install leaves the Grove
// types out of shepherd's scheme.
//
// Served is also what shepherd names the object by in writes (deletes,
// Events): it has the apiVersion and kind a typed object outside the
// scheme could not give. It is never changed.

// Set is a PodCliqueSet as served.
type Set struct {
	grovev1alpha1.PodCliqueSet
	Served *unstructured.Unstructured
}

// Clique is a PodClique as served.
type Clique struct {
	grovev1alpha1.PodClique
	Served *unstructured.Unstructured
}

// ScalingGroup is a PodCliqueScalingGroup as served.
type ScalingGroup struct {
	grovev1alpha1.PodCliqueScalingGroup
	Served *unstructured.Unstructured
}

// Set, Clique and ScalingGroup are not client.Objects: embedding would
// promote the published type's methods and make them one, and a write or
// Event naming the wrapper would then fail at run time (the published types
// are not in shepherd's scheme) or, with a scheme that has them, drop the
// seed fields. These methods shadow DeepCopyObject so that naming a wrapper
// where an object is wanted does not compile: name its Served form.
type notAnObject struct{}

func (*Set) DeepCopyObject(notAnObject)          {}
func (*Clique) DeepCopyObject(notAnObject)       {}
func (*ScalingGroup) DeepCopyObject(notAnObject) {}

// NewObject is an empty object of a Grove kind, read as served: what
// controllers watch, index and get.
func NewObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(kind))
	return u
}

// GetSet reads the PodCliqueSet key.
func GetSet(ctx context.Context, c client.Reader, key client.ObjectKey) (*Set, error) {
	u := NewObject(api.KindPodCliqueSet)
	if err := c.Get(ctx, key, u); err != nil {
		return nil, err
	}
	s := &Set{Served: u}
	return s, decode(u, &s.PodCliqueSet)
}

// ListCliques lists PodCliques.
func ListCliques(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]Clique, error) {
	items, err := list(ctx, c, api.KindPodClique, opts)
	if err != nil {
		return nil, err
	}
	out := make([]Clique, len(items))
	for i := range items {
		out[i].Served = &items[i]
		if err := decode(&items[i], &out[i].PodClique); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ListGroups lists PodCliqueScalingGroups.
func ListGroups(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]ScalingGroup, error) {
	items, err := list(ctx, c, api.KindPodCliqueScalingGroup, opts)
	if err != nil {
		return nil, err
	}
	out := make([]ScalingGroup, len(items))
	for i := range items {
		out[i].Served = &items[i]
		if err := decode(&items[i], &out[i].PodCliqueScalingGroup); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func list(ctx context.Context, c client.Reader, kind string, opts []client.ListOption) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(kind + "List"))
	if err := c.List(ctx, l, opts...); err != nil {
		return nil, fmt.Errorf("listing %ss: %w", kind, err)
	}
	return l.Items, nil
}

// decode fills a published type from a served object. Fields the type
// lacks are ignored: they stay readable in the served object.
func decode(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("reading %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// SetOf, CliqueOf and GroupOf are a typed object as a cluster serving
// Grove's published schema would serve it, for callers that build objects
// rather than read them (tests, the Grove test double); a seed field is
// then added to Served by the caller, or carried by an annotation.
func SetOf(pcs *grovev1alpha1.PodCliqueSet) *Set {
	return &Set{PodCliqueSet: *pcs, Served: served(pcs, api.KindPodCliqueSet)}
}

// CliqueOf is c as served; see SetOf.
func CliqueOf(c *grovev1alpha1.PodClique) Clique {
	return Clique{PodClique: *c, Served: served(c, api.KindPodClique)}
}

// GroupOf is g as served; see SetOf.
func GroupOf(g *grovev1alpha1.PodCliqueScalingGroup) ScalingGroup {
	return ScalingGroup{PodCliqueScalingGroup: *g, Served: served(g, api.KindPodCliqueScalingGroup)}
}

func served(o runtime.Object, kind string) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		// Only a type the converter cannot walk fails, and these three are
		// plain API structs.
		panic(fmt.Sprintf("converting a %s: %v", kind, err))
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(kind))
	return u
}

// CliquesOf is each of cs as served (CliqueOf).
func CliquesOf(cs ...grovev1alpha1.PodClique) []Clique {
	out := make([]Clique, len(cs))
	for i := range cs {
		out[i] = CliqueOf(&cs[i])
	}
	return out
}

// GroupsOf is each of gs as served (GroupOf).
func GroupsOf(gs ...grovev1alpha1.PodCliqueScalingGroup) []ScalingGroup {
	out := make([]ScalingGroup, len(gs))
	for i := range gs {
		out[i] = GroupOf(&gs[i])
	}
	return out
}
