package grove

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
)

// Checks are Grove's rules written in Go (gocheck): the PodCliques and
// scaling groups of a Training PodCliqueSet keep their size (V-PCLQ-1).
var Checks = []gocheck.Check{
	{ID: "V-PCLQ-1", Group: api.GroveGroup, Kinds: []string{api.KindPodClique, api.KindPodCliqueScalingGroup}, Operations: []string{"CREATE", "UPDATE"},
		Reason:      "needs a lookup of another object; a ValidatingAdmissionPolicy sees only the request",
		Description: "when the owning PodCliqueSet is Training: replicas immutable (a scale to 0, which stops it, is allowed), no autoscaling config",
		Validate:    checkTrainingChild},
}

// checkTrainingChild is V-PCLQ-1: PodCliques and PodCliqueScalingGroups of
// a Training PodCliqueSet keep their replicas and have no autoscaling —
// except a scale to 0, which stops the gang rather than resizing it: that
// is how shepherd ends a failed Training set through its owner (Grove
// keeps an existing PodClique's replicas; see package training). The
// owner is the controller ownerReference to a PodCliqueSet, else (for a
// PodClique owned by its scaling group) Grove's part-of label.
func checkTrainingChild(ctx context.Context, l gocheck.Lookups, req *gocheck.Request) []gocheck.Finding {
	o, old := req.Object, req.OldObject
	pcsName := ""
	refs, _ := gocheck.Obj(o, "metadata")["ownerReferences"].([]any)
	for _, r := range refs {
		m, _ := r.(map[string]any)
		gv, _ := schema.ParseGroupVersion(gocheck.Str(m, "apiVersion"))
		if gv.Group == api.GroveGroup && gocheck.Str(m, "kind") == api.KindPodCliqueSet {
			pcsName = gocheck.Str(m, "name")
		}
	}
	if pcsName == "" {
		pcsName = gocheck.Str(gocheck.Path(o, "metadata", "labels"), api.LabelPartOf)
	}
	if pcsName == "" {
		return nil
	}
	pcs, err := l.Get(ctx, grovev1alpha1.GroupVersion.WithKind(api.KindPodCliqueSet), req.Namespace, pcsName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return []gocheck.Finding{{Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("rule V-PCLQ-1 could not look up the owning PodCliqueSet %q: %v", pcsName, err)}}
	}
	// Read as served (Grove's types are in no scheme), so the seed field is
	// there on a cluster whose CRD keeps it.
	if set, ok := pcs.(*unstructured.Unstructured); !ok || !IsTraining(set.Object) {
		return nil
	}
	var out []gocheck.Finding
	spec := gocheck.Obj(o, "spec")
	if req.Operation == "UPDATE" && old != nil {
		r, _ := gocheck.Int(spec, "replicas")
		or, _ := gocheck.Int(gocheck.Obj(old, "spec"), "replicas")
		if r != or && r != 0 {
			out = append(out, gocheck.Finding{Field: "spec.replicas",
				Message: fmt.Sprintf("field is immutable: the owning PodCliqueSet %q is a Training workload (only a scale to 0, which stops it, is allowed)", pcsName)})
		}
	}
	scaleField := "autoScalingConfig"
	if req.Kind.Kind == api.KindPodCliqueScalingGroup {
		scaleField = "scaleConfig"
	}
	if !gocheck.Unset(spec, scaleField) {
		out = append(out, gocheck.Finding{Field: "spec." + scaleField, Reason: "FieldValueForbidden",
			Message: fmt.Sprintf("autoscaling is not allowed: the owning PodCliqueSet %q is a Training workload", pcsName)})
	}
	return out
}
