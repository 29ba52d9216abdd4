// Package reports tests the OpenReports writer against a real
// kube-apiserver: harmless without the OpenReports CRDs, and with them (as
// the openreports.io module ships them; the test installs them as an admin
// would, shepherd never does) one bounded report per namespace, updated in
// place and deleted when its namespace has nothing left to report.
package reports

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/reports"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

var t0 = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

func finding(ns, name, rule string) reports.Finding {
	return reports.Finding{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: ns, Name: name, Rule: rule, Action: "Deny", Field: "spec.activeDeadlineSeconds", Message: "too long", Found: t0}
}

func report(t *testing.T, ns string) *openreportsv1alpha1.Report {
	t.Helper()
	r := &openreportsv1alpha1.Report{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: api.ReportName}, r); err != nil {
		t.Fatalf("reading the report of %s: %v", ns, err)
	}
	return r
}

func TestReports(t *testing.T) {
	ctx := context.Background()
	w := &reports.Writer{Client: env.Client, Reader: env.Client, MaxResults: 10}
	a, b := env.Namespace(t), env.Namespace(t)

	// Without the CRDs: nothing written, no error.
	c, err := w.Sync(ctx, []reports.Finding{finding(a, "tj", "V-TJ-1")})
	if err != nil || c != (reports.Counts{}) {
		t.Fatalf("without the OpenReports CRDs Sync = %+v, %v; want nothing and no error", c, err)
	}

	if err := env.InstallOpenReportsCRDs(); err != nil {
		t.Fatal(err)
	}

	// 25 violations in a (over the cap of 10), one in b, one cluster-scoped.
	var fs []reports.Finding
	for i := 0; i < 25; i++ {
		fs = append(fs, finding(a, fmt.Sprintf("tj-%02d", i), "V-TJ-1"))
	}
	fs = append(fs, finding(b, "tj", "team-label-required"))
	fs = append(fs, reports.Finding{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "ClusterTrainingRuntime", Name: "torch", Rule: "V-TR-6", Action: "Deny", Message: "two schedulers", Found: t0})
	if c, err = w.Sync(ctx, fs); err != nil || c.Created != 3 {
		t.Fatalf("first Sync = %+v, %v; want 3 reports created", c, err)
	}
	ra := report(t, a)
	if len(ra.Results) != 10 || ra.Summary.Fail != 25 || ra.Annotations[reports.AnnotationOmitted] != "15" {
		t.Errorf("report of a: %d results, %d failures, omitted %q; want 10, 25, 15", len(ra.Results), ra.Summary.Fail, ra.Annotations[reports.AnnotationOmitted])
	}
	if got := report(t, b).Results; len(got) != 1 || got[0].Policy != "team-label-required" || got[0].Subjects[0].Name != "tj" {
		t.Errorf("report of b: %+v", got)
	}
	cr := &openreportsv1alpha1.ClusterReport{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: api.ReportName}, cr); err != nil || len(cr.Results) != 1 || cr.Results[0].Policy != "V-TR-6" {
		t.Errorf("cluster report: %+v, %v", cr.Results, err)
	}

	// The same findings again: nothing written.
	if c, err = w.Sync(ctx, fs); err != nil || c.Unchanged != 3 || c.Created+c.Updated+c.Deleted != 0 {
		t.Fatalf("unchanged Sync = %+v, %v; want 3 unchanged and no write", c, err)
	}
	if rv := report(t, a).ResourceVersion; rv != ra.ResourceVersion {
		t.Errorf("an unchanged report was written: resourceVersion %s -> %s", ra.ResourceVersion, rv)
	}

	// Fixed in b, fewer in a, a label an admin added kept: a is updated in
	// place, b's report deleted, the cluster's unchanged.
	ra = report(t, a)
	ra.Labels["team"] = "platform"
	if err := env.Client.Update(ctx, ra); err != nil {
		t.Fatal(err)
	}
	fs2 := append([]reports.Finding{}, fs[:3]...)
	fs2 = append(fs2, fs[len(fs)-1])
	if c, err = w.Sync(ctx, fs2); err != nil || c.Updated != 1 || c.Deleted != 1 || c.Unchanged != 1 {
		t.Fatalf("Sync after fixes = %+v, %v; want 1 updated, 1 deleted, 1 unchanged", c, err)
	}
	got := report(t, a)
	if got.UID != ra.UID || len(got.Results) != 3 || got.Summary.Fail != 3 || got.Labels["team"] != "platform" {
		t.Errorf("report of a after the update: uid kept %v, %d results, %d failures, labels %v", got.UID == ra.UID, len(got.Results), got.Summary.Fail, got.Labels)
	}
	if _, omitted := got.Annotations[reports.AnnotationOmitted]; omitted {
		t.Errorf("report of a under its cap still says results were omitted")
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: b, Name: api.ReportName}, &openreportsv1alpha1.Report{}); !apierrors.IsNotFound(err) {
		t.Errorf("report of b after its only violation was fixed: %v, want NotFound", err)
	}

	// Somebody else's report under shepherd's name is not overwritten.
	foreign := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: api.ReportName, Namespace: b}, Source: "someone-else"}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	_, err = w.Sync(ctx, append(fs2, finding(b, "tj", "team-label-required")))
	if err == nil || !strings.Contains(err.Error(), "not labelled "+api.LabelManagedBy) {
		t.Errorf("Sync over a foreign report: %v; want an error naming the label", err)
	}
	if r := report(t, b); r.Source != "someone-else" {
		t.Errorf("the foreign report was overwritten: source %q", r.Source)
	}
}
