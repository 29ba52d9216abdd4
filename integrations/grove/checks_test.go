package grove_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// setLookups answers a check's lookups of PodCliqueSets from sets, by
// namespace/name, as served (unstructured); a name in fail fails with its
// error. It records every lookup.
type setLookups struct {
	sets  map[string]client.Object
	fail  map[string]error
	asked []string
}

func (l *setLookups) Get(_ context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error) {
	l.asked = append(l.asked, gvk.Kind+" "+namespace+"/"+name)
	if err, ok := l.fail[name]; ok {
		return nil, err
	}
	if o, ok := l.sets[namespace+"/"+name]; ok {
		return o, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: "podcliquesets"}, name)
}

func (l *setLookups) WorkloadAPIServed() bool { return false }

// child is a PodClique (or, for kind PodCliqueScalingGroup, a scaling
// group) of replicas in namespace ns, owned through ownerRefs, with spec
// fields merged in.
func child(kind string, replicas int64, spec map[string]any, ownerRefs ...any) map[string]any {
	b := testkit.Object(api.GroveGroup+"/v1alpha1", kind, "ns", "set-0-worker").Set(replicas, "spec", "replicas").Merge(spec, "spec")
	if len(ownerRefs) > 0 {
		b.Set(ownerRefs, "metadata", "ownerReferences")
	}
	return b.Obj().Object
}

func ownerRef(apiVersion, kind, name string) map[string]any {
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": "u", "controller": true}
}

func TestCheckTrainingChild(t *testing.T) {
	training := testkit.PodCliqueSet("ns", "set").Set("Training", "spec", "workloadType").Obj()
	carrier := testkit.PodCliqueSet("ns", "carried").Annotations(api.AnnotationWorkloadType + "=Training").Obj()
	inference := testkit.PodCliqueSet("ns", "serving").Set("Inference", "spec", "workloadType").Obj()
	sets := map[string]client.Object{"ns/set": training, "ns/carried": carrier, "ns/serving": inference}

	pcsRef := func(name string) any { return ownerRef("grove.io/v1alpha1", api.KindPodCliqueSet, name) }
	immutable := gocheck.Finding{Field: "spec.replicas",
		Message: `field is immutable: the owning PodCliqueSet "set" is a Training workload (only a scale to 0, which stops it, is allowed)`}
	noAutoscaling := func(field, set string) gocheck.Finding {
		return gocheck.Finding{Field: field, Reason: "FieldValueForbidden",
			Message: `autoscaling is not allowed: the owning PodCliqueSet "` + set + `" is a Training workload`}
	}
	scaled := map[string]any{"autoScalingConfig": map[string]any{"maxReplicas": int64(4)}}
	for _, tc := range []struct {
		name      string
		kind      string // default PodClique
		op        string // default UPDATE
		obj, old  map[string]any
		want      []gocheck.Finding
		wantAsked []string
	}{
		{name: "no owner: nothing looked up", obj: child(api.KindPodClique, 3, nil), old: child(api.KindPodClique, 2, nil)},
		{name: "a resize of a Training set's clique", obj: child(api.KindPodClique, 3, nil, pcsRef("set")), old: child(api.KindPodClique, 2, nil, pcsRef("set")),
			want: []gocheck.Finding{immutable}, wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a scale to 0 stops the gang", obj: child(api.KindPodClique, 0, nil, pcsRef("set")), old: child(api.KindPodClique, 2, nil, pcsRef("set")),
			wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "replicas unchanged", obj: child(api.KindPodClique, 2, nil, pcsRef("set")), old: child(api.KindPodClique, 2, nil, pcsRef("set")),
			wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a create has nothing to resize", op: "CREATE", obj: child(api.KindPodClique, 3, nil, pcsRef("set")),
			wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a clique with autoscaling", op: "CREATE", obj: child(api.KindPodClique, 2, scaled, pcsRef("set")),
			want: []gocheck.Finding{noAutoscaling("spec.autoScalingConfig", "set")}, wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "an autoscaling config of null is none", op: "CREATE", obj: child(api.KindPodClique, 2, map[string]any{"autoScalingConfig": nil}, pcsRef("set")),
			wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "both at once", obj: child(api.KindPodClique, 3, scaled, pcsRef("set")), old: child(api.KindPodClique, 2, nil, pcsRef("set")),
			want: []gocheck.Finding{immutable, noAutoscaling("spec.autoScalingConfig", "set")}, wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a scaling group's autoscaling is its scaleConfig", kind: api.KindPodCliqueScalingGroup, op: "CREATE",
			obj:  child(api.KindPodCliqueScalingGroup, 2, map[string]any{"scaleConfig": map[string]any{"maxReplicas": int64(4)}}, pcsRef("set")),
			want: []gocheck.Finding{noAutoscaling("spec.scaleConfig", "set")}, wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a scaling group has no autoScalingConfig to forbid", kind: api.KindPodCliqueScalingGroup, op: "CREATE",
			obj: child(api.KindPodCliqueScalingGroup, 2, scaled, pcsRef("set")), wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "a Training set in the carrier form", obj: child(api.KindPodClique, 3, nil, pcsRef("carried")), old: child(api.KindPodClique, 2, nil, pcsRef("carried")),
			want:      []gocheck.Finding{{Field: "spec.replicas", Message: `field is immutable: the owning PodCliqueSet "carried" is a Training workload (only a scale to 0, which stops it, is allowed)`}},
			wantAsked: []string{"PodCliqueSet ns/carried"}},
		{name: "an Inference set's clique may resize and autoscale", obj: child(api.KindPodClique, 3, scaled, pcsRef("serving")), old: child(api.KindPodClique, 2, nil, pcsRef("serving")),
			wantAsked: []string{"PodCliqueSet ns/serving"}},
		{name: "an owner that is gone", obj: child(api.KindPodClique, 3, scaled, pcsRef("gone")), old: child(api.KindPodClique, 2, nil, pcsRef("gone")),
			wantAsked: []string{"PodCliqueSet ns/gone"}},
		{name: "a lookup that fails denies", obj: child(api.KindPodClique, 3, nil, pcsRef("broken")), old: child(api.KindPodClique, 2, nil, pcsRef("broken")),
			want: []gocheck.Finding{{Field: "metadata.ownerReferences",
				Message: `rule V-PCLQ-1 could not look up the owning PodCliqueSet "broken": etcd is down`}},
			wantAsked: []string{"PodCliqueSet ns/broken"}},
		// A PodClique of a scaling group is owned by the group; Grove's
		// part-of label names the set.
		{name: "the part-of label when no PodCliqueSet owns it",
			obj:       testkit.Object("grove.io/v1alpha1", api.KindPodClique, "ns", "c").Labels(api.LabelPartOf+"=set").Set(int64(3), "spec", "replicas").Obj().Object,
			old:       child(api.KindPodClique, 2, nil),
			want:      []gocheck.Finding{immutable},
			wantAsked: []string{"PodCliqueSet ns/set"}},
		{name: "another group's PodCliqueSet is not the owner", obj: child(api.KindPodClique, 3, nil, ownerRef("example.com/v1", api.KindPodCliqueSet, "set")),
			old: child(api.KindPodClique, 2, nil)},
		{name: "a scaling group owner is not a PodCliqueSet", obj: child(api.KindPodClique, 3, nil, ownerRef("grove.io/v1alpha1", api.KindPodCliqueScalingGroup, "set-0-sg")),
			old: child(api.KindPodClique, 2, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, op := tc.kind, tc.op
			if kind == "" {
				kind = api.KindPodClique
			}
			if op == "" {
				op = "UPDATE"
			}
			l := &setLookups{sets: sets, fail: map[string]error{"broken": errors.New("etcd is down")}}
			req := &gocheck.Request{Operation: op, Namespace: "ns", Kind: schema.GroupKind{Group: api.GroveGroup, Kind: kind}, Object: tc.obj, OldObject: tc.old}
			got := grove.Checks[0].Validate(context.Background(), l, req)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAsked, l.asked); diff != "" {
				t.Errorf("lookups (-want +got):\n%s", diff)
			}
		})
	}
}

// The set looked up must be read as served: a typed object (as a scheme
// that knew Grove's types would return) is not judged.
func TestCheckTrainingChildNeedsTheSetAsServed(t *testing.T) {
	l := &setLookups{sets: map[string]client.Object{"ns/set": &struct{ client.Object }{}}}
	ref := ownerRef("grove.io/v1alpha1", api.KindPodCliqueSet, "set")
	req := &gocheck.Request{Operation: "UPDATE", Namespace: "ns", Kind: schema.GroupKind{Group: api.GroveGroup, Kind: api.KindPodClique},
		Object: child(api.KindPodClique, 3, nil, ref), OldObject: child(api.KindPodClique, 2, nil, ref)}
	if got := grove.Checks[0].Validate(context.Background(), l, req); got != nil {
		t.Errorf("findings %+v for a set not read as served, want none", got)
	}
}
