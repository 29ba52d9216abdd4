package reports

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
)

// Permissions the Writer needs (for RBAC generation; test/rbac checks the
// shipped RBAC grants them).
// +kubebuilder:rbac:groups=openreports.io,resources=reports;clusterreports,verbs=get;list;create;patch;delete

// Writer keeps the cluster's shepherd reports equal to the findings.
type Writer struct {
	// Client writes the reports. Reader lists and reads them: an
	// uncached reader (the manager's APIReader), so that shepherd does
	// not hold an informer on every Report of the cluster, most of them
	// other engines'.
	Client client.Client
	Reader client.Reader
	// MaxResults bounds each report (DefaultMaxResults when 0).
	MaxResults int

	// absent remembers that the CRDs were missing, to say so once.
	absent atomic.Bool
}

// Counts says what one Sync wrote.
type Counts struct {
	Created, Updated, Deleted, Unchanged int
}

// Sync makes the reports say exactly the findings: it creates and updates
// the reports of namespaces with findings and deletes shepherd's reports
// of namespaces without. Without the OpenReports CRDs it does nothing.
func (w *Writer) Sync(ctx context.Context, findings []Finding) (Counts, error) {
	log := ctrl.LoggerFrom(ctx).WithName("reports")
	desired := Desired(findings, w.MaxResults)
	var c Counts

	existingNS, err := w.existing(ctx)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		if !w.absent.Swap(true) {
			log.Info("the cluster does not serve openreports.io/v1alpha1: no Reports written (the WorkloadPolicy status and /audit are the record)")
		}
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if w.absent.Swap(false) {
		log.Info("the cluster serves openreports.io/v1alpha1: writing Reports")
	}

	var errs []error
	for ns, want := range desired {
		if err := w.apply(ctx, ns, want, &c); err != nil {
			errs = append(errs, err)
		}
	}
	for ns, uid := range existingNS {
		if _, keep := desired[ns]; keep {
			continue
		}
		deleted, err := w.delete(ctx, ns, uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			c.Deleted++
		}
	}
	return c, errors.Join(errs...)
}

// existing lists shepherd's reports: namespace ("" for the ClusterReport)
// to UID.
func (w *Writer) existing(ctx context.Context) (map[string]metav1.Object, error) {
	sel := client.MatchingLabels{api.LabelManagedBy: api.FieldManager}
	out := map[string]metav1.Object{}
	var rl openreportsv1alpha1.ReportList
	if err := w.Reader.List(ctx, &rl, sel); err != nil {
		return nil, err
	}
	for i := range rl.Items {
		if rl.Items[i].Name == api.ReportName {
			out[rl.Items[i].Namespace] = &rl.Items[i]
		}
	}
	var cl openreportsv1alpha1.ClusterReportList
	if err := w.Reader.List(ctx, &cl, sel); err != nil {
		return nil, err
	}
	for i := range cl.Items {
		if cl.Items[i].Name == api.ReportName {
			out[""] = &cl.Items[i]
		}
	}
	return out, nil
}

// apply creates the report of ns, or updates it in place when what it
// says differs; labels and annotations other than shepherd's are kept.
func (w *Writer) apply(ctx context.Context, ns string, want *openreportsv1alpha1.Report, c *Counts) error {
	fresh, body := reportObject(ns, want)
	key := client.ObjectKey{Namespace: ns, Name: api.ReportName}
	// Read into an empty object: decoding into the desired one would keep
	// whatever the stored report lacks.
	obj := emptyReport(ns)
	if err := w.Reader.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading report %s: %w", key, err)
		}
		if err := w.Client.Create(ctx, fresh, client.FieldOwner(api.FieldManager)); err != nil {
			return fmt.Errorf("creating report %s: %w", key, err)
		}
		c.Created++
		return nil
	}
	cur := bodyOf(obj)
	if equality.Semantic.DeepEqual(cur, body) &&
		obj.GetLabels()[api.LabelManagedBy] == api.FieldManager &&
		obj.GetAnnotations()[AnnotationOmitted] == want.Annotations[AnnotationOmitted] {
		c.Unchanged++
		return nil
	}
	if obj.GetLabels()[api.LabelManagedBy] != api.FieldManager {
		// Somebody else's report under shepherd's name: not ours to
		// overwrite.
		return fmt.Errorf("report %s exists and is not labelled %s=%s; rename or delete it so shepherd can write its own", key, api.LabelManagedBy, api.FieldManager)
	}
	orig := obj.DeepCopyObject().(client.Object)
	setBody(obj, body)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, AnnotationOmitted)
	for k, v := range want.Annotations {
		ann[k] = v
	}
	obj.SetAnnotations(ann)
	// A merge patch of what changed, with the read resourceVersion as
	// precondition: it never overwrites a concurrent writer, and labels or
	// annotations others added stay.
	if err := w.Client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(api.FieldManager)); err != nil {
		return fmt.Errorf("updating report %s: %w", key, err)
	}
	c.Updated++
	return nil
}

// delete deletes the report of ns listed as existing, by its UID; false
// when it was already gone (someone else deleted it since the list).
func (w *Writer) delete(ctx context.Context, ns string, existing metav1.Object) (bool, error) {
	obj := emptyReport(ns)
	obj.SetName(api.ReportName)
	obj.SetNamespace(ns)
	uid := existing.GetUID()
	err := w.Client.Delete(ctx, obj, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting report %s/%s: %w", ns, api.ReportName, err)
	}
	return true, nil
}

// body is what a report says, apart from its metadata.
type body struct {
	Source        string
	Configuration *openreportsv1alpha1.ReportConfiguration
	Summary       openreportsv1alpha1.ReportSummary
	Results       []openreportsv1alpha1.ReportResult
}

// reportObject is the object to read or write for ns: a Report, or the
// ClusterReport for "".
func reportObject(ns string, want *openreportsv1alpha1.Report) (client.Object, body) {
	b := body{Source: want.Source, Configuration: want.Configuration, Summary: want.Summary, Results: want.Results}
	if ns == "" {
		cr := &openreportsv1alpha1.ClusterReport{ObjectMeta: *want.ObjectMeta.DeepCopy()}
		cr.Namespace = ""
		setBody(cr, b)
		return cr, b
	}
	r := want.DeepCopy()
	return r, b
}

func emptyReport(ns string) client.Object {
	if ns == "" {
		return &openreportsv1alpha1.ClusterReport{}
	}
	return &openreportsv1alpha1.Report{}
}

func bodyOf(obj client.Object) body {
	switch r := obj.(type) {
	case *openreportsv1alpha1.Report:
		return body{Source: r.Source, Configuration: r.Configuration, Summary: r.Summary, Results: r.Results}
	case *openreportsv1alpha1.ClusterReport:
		return body{Source: r.Source, Configuration: r.Configuration, Summary: r.Summary, Results: r.Results}
	}
	return body{}
}

func setBody(obj client.Object, b body) {
	switch r := obj.(type) {
	case *openreportsv1alpha1.Report:
		r.Source, r.Configuration, r.Summary, r.Results = b.Source, b.Configuration, b.Summary, b.Results
	case *openreportsv1alpha1.ClusterReport:
		r.Source, r.Configuration, r.Summary, r.Results = b.Source, b.Configuration, b.Summary, b.Results
	}
}
