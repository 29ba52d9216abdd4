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
// seed field the published type lacks.
//
// The published types are plain structs, in no scheme and not
// runtime.Objects, so nothing can read a Grove object through them by
// mistake; Served is what shepherd names an object by in writes (deletes,
// patches, Events). It is never changed.

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
	return SetFrom(u)
}

// ListCliques lists PodCliques.
func ListCliques(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]Clique, error) {
	return listAs(ctx, c, api.KindPodClique, opts, CliqueFrom)
}

// ListGroups lists PodCliqueScalingGroups.
func ListGroups(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]ScalingGroup, error) {
	return listAs(ctx, c, api.KindPodCliqueScalingGroup, opts, GroupFrom)
}

// SetFrom, CliqueFrom and GroupFrom read a served object (u, kept as
// Served and never changed).
func SetFrom(u *unstructured.Unstructured) (*Set, error) {
	s := &Set{Served: u}
	return s, decode(u, &s.PodCliqueSet)
}

// CliqueFrom is a PodClique read from u; see SetFrom.
func CliqueFrom(u *unstructured.Unstructured) (Clique, error) {
	c := Clique{Served: u}
	return c, decode(u, &c.PodClique)
}

// GroupFrom is a PodCliqueScalingGroup read from u; see SetFrom.
func GroupFrom(u *unstructured.Unstructured) (ScalingGroup, error) {
	g := ScalingGroup{Served: u}
	return g, decode(u, &g.PodCliqueScalingGroup)
}

func listAs[T any](ctx context.Context, c client.Reader, kind string, opts []client.ListOption, from func(*unstructured.Unstructured) (T, error)) ([]T, error) {
	items, err := list(ctx, c, kind, opts)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(items))
	for i := range items {
		if out[i], err = from(&items[i]); err != nil {
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
// rather than read them (tests); a seed field is
// then added to Served by the caller, or carried by an annotation.
func SetOf(pcs *grovev1alpha1.PodCliqueSet) *Set {
	return must(SetFrom(served(pcs, api.KindPodCliqueSet)))
}

// CliqueOf is c as served; see SetOf.
func CliqueOf(c *grovev1alpha1.PodClique) Clique {
	return must(CliqueFrom(served(c, api.KindPodClique)))
}

// GroupOf is g as served; see SetOf.
func GroupOf(g *grovev1alpha1.PodCliqueScalingGroup) ScalingGroup {
	return must(GroupFrom(served(g, api.KindPodCliqueScalingGroup)))
}

// must is for the builders: a published type converted to its served form
// always reads back.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func served(o any, kind string) *unstructured.Unstructured {
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
