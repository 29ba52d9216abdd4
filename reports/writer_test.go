package reports

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/shepherd-k8s/shepherd/api"
)

// fakeCluster is a cluster serving the OpenReports CRDs and holding objs.
func fakeCluster(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := openreportsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// storedReport is what a test checks of a report in the cluster.
type storedReport struct {
	Kind, Namespace, Name string
	Labels, Annotations   map[string]string
	Source                string
	Summary               openreportsv1alpha1.ReportSummary
	// Policies are the results' policy and subject, in order.
	Policies []string
}

// clusterReports lists every Report and ClusterReport c holds, shepherd's or not.
func clusterReports(t *testing.T, c client.Client) []storedReport {
	t.Helper()
	ctx := context.Background()
	var out []storedReport
	brief := func(kind string, m metav1.ObjectMeta, source string, sum openreportsv1alpha1.ReportSummary, rs []openreportsv1alpha1.ReportResult) storedReport {
		s := storedReport{Kind: kind, Namespace: m.Namespace, Name: m.Name, Labels: m.Labels, Annotations: m.Annotations, Source: source, Summary: sum}
		for _, r := range rs {
			s.Policies = append(s.Policies, r.Policy+" "+r.Subjects[0].Name)
		}
		return s
	}
	var rl openreportsv1alpha1.ReportList
	if err := c.List(ctx, &rl); err != nil {
		t.Fatal(err)
	}
	for _, r := range rl.Items {
		out = append(out, brief("Report", r.ObjectMeta, r.Source, r.Summary, r.Results))
	}
	var cl openreportsv1alpha1.ClusterReportList
	if err := c.List(ctx, &cl); err != nil {
		t.Fatal(err)
	}
	for _, r := range cl.Items {
		out = append(out, brief("ClusterReport", r.ObjectMeta, r.Source, r.Summary, r.Results))
	}
	slices.SortFunc(out, func(a, b storedReport) int {
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	return out
}

// written is the report Desired makes of fs for ns, as the cluster would
// store it: a ClusterReport for "".
func written(ns string, fs ...Finding) client.Object {
	r := Desired(fs, 0)[ns]
	obj, _ := reportObject(ns, r)
	return obj
}

var managed = map[string]string{api.LabelManagedBy: api.FieldManager}

func TestSyncMakesTheReportsSayTheFindings(t *testing.T) {
	t.Parallel()
	deny := finding("a", "tj1", "V-TJ-1", "Deny")
	warn := finding("b", "tj2", "team", "Warn")
	crt := Finding{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "ClusterTrainingRuntime", Name: "torch", Rule: "V-TR-6", Action: "Deny", Message: "two schedulers", Found: t0}

	// Report a as an admin left it: a label and an annotation of their
	// own, and the omitted count of an earlier, larger report.
	annotated := written("a", deny, finding("a", "tj0", "V-TJ-1", "Deny"))
	annotated.SetLabels(map[string]string{api.LabelManagedBy: api.FieldManager, "team": "platform"})
	annotated.SetAnnotations(map[string]string{"note": "kept", AnnotationOmitted: "7"})
	// Not shepherd's to delete: another engine's report in a namespace
	// shepherd has nothing to say about, and one under another name
	// although labelled like shepherd's.
	kyverno := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: "kyverno-report", Namespace: "c", Labels: map[string]string{api.LabelManagedBy: "kyverno"}}, Source: "kyverno"}
	otherName := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: "c", Labels: managed}, Source: "shepherd"}
	unlabelled := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: api.ReportName, Namespace: "d"}, Source: "someone"}

	for _, tc := range []struct {
		name     string
		existing []client.Object
		findings []Finding
		want     Counts
		after    []storedReport
	}{
		{
			name:     "an empty cluster gets one report per namespace and the cluster's",
			findings: []Finding{deny, warn, crt},
			want:     Counts{Created: 3},
			after: []storedReport{
				{Kind: "ClusterReport", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TR-6 torch"}},
				{Kind: "Report", Namespace: "a", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TJ-1 tj1"}},
				{Kind: "Report", Namespace: "b", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Warn: 1}, Policies: []string{"team tj2"}},
			},
		},
		{
			name:     "reports that already say the findings are left alone",
			existing: []client.Object{written("a", deny), written("", crt)},
			findings: []Finding{crt, deny},
			want:     Counts{Unchanged: 2},
			after: []storedReport{
				{Kind: "ClusterReport", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TR-6 torch"}},
				{Kind: "Report", Namespace: "a", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TJ-1 tj1"}},
			},
		},
		{
			name:     "a changed report is updated in place, keeping what others added and dropping the stale omitted count",
			existing: []client.Object{annotated},
			findings: []Finding{deny},
			want:     Counts{Updated: 1},
			after: []storedReport{
				{Kind: "Report", Namespace: "a", Name: api.ReportName, Labels: map[string]string{api.LabelManagedBy: api.FieldManager, "team": "platform"}, Annotations: map[string]string{"note": "kept"},
					Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TJ-1 tj1"}},
			},
		},
		{
			name:     "shepherd's reports of namespaces with nothing left are deleted, nobody else's",
			existing: []client.Object{written("a", deny), written("b", warn), written("", crt), kyverno, otherName, unlabelled},
			findings: []Finding{deny},
			want:     Counts{Unchanged: 1, Deleted: 2},
			after: []storedReport{
				{Kind: "Report", Namespace: "a", Name: api.ReportName, Labels: managed, Source: api.ReportSource, Summary: openreportsv1alpha1.ReportSummary{Fail: 1}, Policies: []string{"V-TJ-1 tj1"}},
				{Kind: "Report", Namespace: "c", Name: "kyverno-report", Labels: map[string]string{api.LabelManagedBy: "kyverno"}, Source: "kyverno"},
				{Kind: "Report", Namespace: "c", Name: "older", Labels: managed, Source: "shepherd"},
				{Kind: "Report", Namespace: "d", Name: api.ReportName, Source: "someone"},
			},
		},
		{
			name:     "no findings: no report of shepherd's is left",
			existing: []client.Object{written("a", deny), written("", crt)},
			want:     Counts{Deleted: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var objs []client.Object
			for _, o := range tc.existing {
				objs = append(objs, o.DeepCopyObject().(client.Object))
			}
			c := fakeCluster(t, objs...)
			w := &Writer{Client: c, Reader: c}
			got, err := w.Sync(context.Background(), tc.findings)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.after, clusterReports(t, c)); diff != "" {
				t.Errorf("reports after Sync (-want +got):\n%s", diff)
			}
		})
	}
}

// An unchanged Sync writes nothing: the stored reports keep their
// resourceVersions (what the integration suite checks against a real
// apiserver).
func TestSyncTwiceWritesOnce(t *testing.T) {
	t.Parallel()
	c := fakeCluster(t)
	w := &Writer{Client: c, Reader: c, MaxResults: 1}
	// Over the cap of one: the omitted annotation must compare equal too.
	fs := []Finding{finding("a", "tj1", "V-TJ-1", "Deny"), finding("a", "tj2", "V-TJ-1", "Deny")}
	if got, err := w.Sync(context.Background(), fs); err != nil || got != (Counts{Created: 1}) {
		t.Fatalf("first Sync = %+v, %v; want one created", got, err)
	}
	before := &openreportsv1alpha1.Report{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: api.ReportName}, before); err != nil {
		t.Fatal(err)
	}
	if got, err := w.Sync(context.Background(), fs); err != nil || got != (Counts{Unchanged: 1}) {
		t.Fatalf("second Sync = %+v, %v; want one unchanged", got, err)
	}
	after := &openreportsv1alpha1.Report{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: api.ReportName}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || after.Annotations[AnnotationOmitted] != "1" {
		t.Errorf("resourceVersion %s -> %s, omitted %q; want unchanged and 1", before.ResourceVersion, after.ResourceVersion, after.Annotations[AnnotationOmitted])
	}
}

// A failure with one report is returned, and the others are still
// written: one bad namespace does not hold up every report.
func TestSyncErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	inB := func(key client.ObjectKey) bool { return key.Namespace == "b" }
	foreign := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: api.ReportName, Namespace: "b"}, Source: "someone-else"}
	for _, tc := range []struct {
		name     string
		existing []client.Object
		funcs    interceptor.Funcs
		want     Counts
		errHas   string
		// bSource is the source of the report of b afterwards ("" if none).
		bSource string
	}{
		{
			name:     "somebody else's report under shepherd's name is not overwritten",
			existing: []client.Object{foreign},
			want:     Counts{Created: 1},
			errHas:   "is not labelled " + api.LabelManagedBy + "=" + api.FieldManager,
			bSource:  "someone-else",
		},
		{
			name: "a report that cannot be read",
			funcs: interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if inB(key) {
					return boom
				}
				return c.Get(ctx, key, obj, opts...)
			}},
			want:   Counts{Created: 1},
			errHas: "reading report b/" + api.ReportName + ": boom",
		},
		{
			name: "a report that cannot be created",
			funcs: interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if obj.GetNamespace() == "b" {
					return apierrors.NewForbidden(schema.GroupResource{Group: "openreports.io", Resource: "reports"}, obj.GetName(), boom)
				}
				return c.Create(ctx, obj, opts...)
			}},
			want:   Counts{Created: 1},
			errHas: "creating report b/" + api.ReportName,
		},
		{
			name:     "a report that cannot be deleted",
			existing: []client.Object{written("c", finding("c", "tj", "V-TJ-1", "Deny"))},
			funcs: interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				return boom
			}},
			want:    Counts{Created: 2},
			errHas:  "deleting report c/" + api.ReportName + ": boom",
			bSource: api.ReportSource,
		},
		{
			name:     "a report gone before its delete is not counted as deleted",
			existing: []client.Object{written("c", finding("c", "tj", "V-TJ-1", "Deny"))},
			funcs: interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				return apierrors.NewNotFound(schema.GroupResource{Group: "openreports.io", Resource: "reports"}, obj.GetName())
			}},
			want:    Counts{Created: 2},
			bSource: api.ReportSource,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := fakeCluster(t, tc.existing...)
			c := interceptor.NewClient(base, tc.funcs)
			w := &Writer{Client: c, Reader: c}
			got, err := w.Sync(context.Background(), []Finding{finding("a", "tj", "V-TJ-1", "Deny"), finding("b", "tj", "V-TJ-1", "Deny")})
			if tc.errHas == "" && err != nil {
				t.Errorf("Sync: %v, want no error", err)
			}
			if tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Errorf("Sync: %v, want an error containing %q", err, tc.errHas)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			a := &openreportsv1alpha1.Report{}
			if err := base.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: api.ReportName}, a); err != nil || len(a.Results) != 1 {
				t.Errorf("the report of a beside the failure: %v, %d results", err, len(a.Results))
			}
			b := &openreportsv1alpha1.Report{}
			if err := base.Get(context.Background(), client.ObjectKey{Namespace: "b", Name: api.ReportName}, b); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			if b.Source != tc.bSource {
				t.Errorf("the report of b has source %q, want %q", b.Source, tc.bSource)
			}
		})
	}
}

// The update is a patch with the read resourceVersion as precondition: a
// write to the report between shepherd's read and its patch fails the
// patch rather than being overwritten.
func TestSyncDoesNotOverwriteAConcurrentWrite(t *testing.T) {
	t.Parallel()
	base := fakeCluster(t, written("a", finding("a", "old", "V-TJ-1", "Deny")))
	reader := interceptor.NewClient(base, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		other := obj.DeepCopyObject().(client.Object)
		other.SetLabels(map[string]string{api.LabelManagedBy: api.FieldManager, "writer": "other"})
		return c.Update(ctx, other)
	}})
	w := &Writer{Client: base, Reader: reader}
	_, err := w.Sync(context.Background(), []Finding{finding("a", "new", "V-TJ-1", "Deny")})
	if !apierrors.IsConflict(err) {
		t.Errorf("Sync after a concurrent write: %v, want a conflict", err)
	}
	r := &openreportsv1alpha1.Report{}
	if err := base.Get(context.Background(), client.ObjectKey{Namespace: "a", Name: api.ReportName}, r); err != nil {
		t.Fatal(err)
	}
	if r.Labels["writer"] != "other" || r.Results[0].Subjects[0].Name != "old" {
		t.Errorf("after the conflict: labels %v, result of %s; want the other writer's label and the old result", r.Labels, r.Results[0].Subjects[0].Name)
	}
}

// A report is deleted only if it is still the one listed: the delete
// carries its UID as precondition, so a report recreated since is kept.
func TestSyncDeletesTheListedReportOnly(t *testing.T) {
	t.Parallel()
	old := written("c", finding("c", "tj", "V-TJ-1", "Deny"))
	old.SetUID("uid-of-the-listed-report")
	var got []types.UID
	c := interceptor.NewClient(fakeCluster(t, old), interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		o := &client.DeleteOptions{}
		o.ApplyOptions(opts)
		if o.Preconditions != nil && o.Preconditions.UID != nil {
			got = append(got, *o.Preconditions.UID)
		} else {
			got = append(got, "")
		}
		return c.Delete(ctx, obj, opts...)
	}})
	w := &Writer{Client: c, Reader: c}
	if n, err := w.Sync(context.Background(), nil); err != nil || n != (Counts{Deleted: 1}) {
		t.Fatalf("Sync = %+v, %v; want one deleted", n, err)
	}
	if diff := cmp.Diff([]types.UID{"uid-of-the-listed-report"}, got); diff != "" {
		t.Errorf("delete preconditions (-want +got):\n%s", diff)
	}
}

// Without the OpenReports CRDs Sync writes nothing, fails nothing and
// says so once; once they are served it says so and writes.
func TestSyncWithoutTheCRDs(t *testing.T) {
	t.Parallel()
	var lines []string
	ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	served := false
	base := fakeCluster(t)
	var writes int
	c := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if !served {
				return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "openreports.io", Kind: "Report"}, SearchedVersions: []string{"v1alpha1"}}
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
	})
	w := &Writer{Client: c, Reader: c}
	fs := []Finding{finding("a", "tj", "V-TJ-1", "Deny")}
	for i := 0; i < 2; i++ {
		if got, err := w.Sync(ctx, fs); err != nil || got != (Counts{}) || writes != 0 {
			t.Fatalf("Sync %d without the CRDs = %+v, %v, %d writes; want nothing and no error", i, got, err, writes)
		}
	}
	served = true
	if got, err := w.Sync(ctx, fs); err != nil || got != (Counts{Created: 1}) {
		t.Fatalf("Sync once served = %+v, %v; want one created", got, err)
	}
	var said []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "does not serve openreports.io"):
			said = append(said, "absent")
		case strings.Contains(l, "serves openreports.io"):
			said = append(said, "served")
		}
	}
	if diff := cmp.Diff([]string{"absent", "served"}, said); diff != "" {
		t.Errorf("what Sync logged (-want +got):\n%s\nall lines: %q", diff, lines)
	}
}
