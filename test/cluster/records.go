package cluster

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/reconcile/record"
)

// Record reads shepherd's WorkloadRecord of the workload kind ns/name; nil
// when there is none.
func Record(ctx context.Context, c client.Reader, ns, kind, name string) (*shepherdv1alpha1.WorkloadRecord, error) {
	var rec shepherdv1alpha1.WorkloadRecord
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: record.Name(kind, name)}, &rec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return &rec, nil
}
