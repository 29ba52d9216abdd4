package gang

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// PatchClique writes what want changes on the PodClique cur: first its
// annotations (the status carriers live there on Grove's schema), with a
// merge patch of the object, then its status, with a merge patch of the
// status subresource — each only if it changed, each carrying an
// optimistic lock so that neither shepherd's other controller nor Grove
// loses a write (the status patch carries the whole conditions list as
// read). Annotations go first: the wasAvailable carrier must be durable
// before a condition computed from it is. c writes as shepherd's field
// manager (see Setup): that is how shepherd tells its own
// MinAvailableBreached from Grove's. A conflict or NotFound is returned as
// is; callers requeue. wrote reports whether anything was written.
func PatchClique(ctx context.Context, c client.Client, cur, want *grovev1alpha1.PodClique) (wrote bool, err error) {
	if !equality.Semantic.DeepEqual(cur.Annotations, want.Annotations) {
		next := cur.DeepCopy()
		next.Annotations = want.Annotations
		if err := c.Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return wrote, fmt.Errorf("patching annotations of PodClique %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		wrote, cur = true, next // next holds the new resourceVersion
	}
	if !equality.Semantic.DeepEqual(cur.Status, want.Status) {
		next := cur.DeepCopy()
		next.Status = want.Status
		if err := c.Status().Patch(ctx, next, client.MergeFromWithOptions(cur, client.MergeFromWithOptimisticLock{})); err != nil {
			return wrote, fmt.Errorf("patching status of PodClique %s/%s: %w", cur.Namespace, cur.Name, err)
		}
		wrote = true
	}
	return wrote, nil
}
