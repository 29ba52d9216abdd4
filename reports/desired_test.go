package reports

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
)

var t0 = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

func finding(ns, name, rule, action string) Finding {
	return Finding{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Rule: rule, Action: action, Field: "spec.x", Message: rule + " fails", Found: t0}
}

func TestDesiredOneReportPerNamespace(t *testing.T) {
	crt := Finding{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "ClusterTrainingRuntime", Name: "torch", Rule: "V-TR-6", Action: "Deny", Message: "two schedulers", Found: t0}
	got := Desired([]Finding{
		finding("b", "tj2", "V-TJ-1", "Deny"),
		finding("a", "tj1", "team", "Warn"),
		finding("b", "tj1", "audit-only", "Audit"),
		crt,
	}, 0)
	if len(got) != 3 {
		t.Fatalf("%d reports, want a, b and the cluster's", len(got))
	}
	b := got["b"]
	if b.Name != api.ReportName || b.Namespace != "b" || b.Labels[api.LabelManagedBy] != api.FieldManager || b.Source != api.ReportSource {
		t.Errorf("report b metadata/source: %+v %q", b.ObjectMeta, b.Source)
	}
	if diff := cmp.Diff(openreportsv1alpha1.ReportSummary{Fail: 1, Warn: 1}, b.Summary); diff != "" {
		t.Errorf("summary of b (-want +got):\n%s", diff)
	}
	// Sorted by kind, namespace, name, rule: tj1 before tj2.
	var order []string
	for _, r := range b.Results {
		order = append(order, r.Subjects[0].Name+" "+r.Policy+" "+string(r.Result)+" "+string(r.Severity)+" "+r.Properties["action"])
	}
	if diff := cmp.Diff([]string{"tj1 audit-only warn low Audit", "tj2 V-TJ-1 fail high Deny"}, order); diff != "" {
		t.Errorf("results of b (-want +got):\n%s", diff)
	}
	if r := b.Results[1]; r.Description != "V-TJ-1 fails" || r.Properties["field"] != "spec.x" || r.Timestamp.Seconds != t0.Unix() || r.Subjects[0].UID != "uid-b-tj2" {
		t.Errorf("result: %+v", r)
	}
	if c := got[""]; c.Namespace != "" || len(c.Results) != 1 || c.Results[0].Subjects[0].Kind != "ClusterTrainingRuntime" {
		t.Errorf("cluster report: %+v", c)
	}
	if _, ok := got["a"].Annotations[AnnotationOmitted]; ok {
		t.Errorf("a report under its cap says results were omitted")
	}
}

func TestDesiredIsBoundedAndCountsEverything(t *testing.T) {
	var fs []Finding
	for i := 0; i < 25; i++ {
		fs = append(fs, finding("ns", fmt.Sprintf("tj-%02d", i), "V-TJ-1", "Deny"))
	}
	for i := 0; i < 5; i++ {
		fs = append(fs, finding("ns", fmt.Sprintf("tj-%02d", i), "team", "Warn"))
	}
	r := Desired(fs, 10)["ns"]
	if len(r.Results) != 10 {
		t.Fatalf("%d results, want the cap of 10", len(r.Results))
	}
	if diff := cmp.Diff(openreportsv1alpha1.ReportSummary{Fail: 25, Warn: 5}, r.Summary); diff != "" {
		t.Errorf("summary counts every finding (-want +got):\n%s", diff)
	}
	if r.Annotations[AnnotationOmitted] != "20" || r.Configuration.Limits.MaxResults != 10 {
		t.Errorf("omitted %q, maxResults %d; want 20 and 10", r.Annotations[AnnotationOmitted], r.Configuration.Limits.MaxResults)
	}
	// The kept ones are the first in the stable order, whatever the input
	// order.
	rev := make([]Finding, len(fs))
	for i := range fs {
		rev[len(fs)-1-i] = fs[i]
	}
	if diff := cmp.Diff(r, Desired(rev, 10)["ns"]); diff != "" {
		t.Errorf("the report depends on the findings' order (-first +reversed):\n%s", diff)
	}
	if r.Results[0].Subjects[0].Name != "tj-00" || r.Results[1].Subjects[0].Name != "tj-00" {
		t.Errorf("first results: %s %s", r.Results[0].Subjects[0].Name, r.Results[1].Subjects[0].Name)
	}
}
