package audit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// reportPolicy applies to the test's namespace only: the suite's other
// tests leave violating objects behind in theirs.
const reportPolicy = `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: audit-report-team}
spec:
  action: Deny
  match:
    resources: [{apiGroups: [grove.io], kinds: [PodCliqueSet]}]
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: NAMESPACE}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: a team label is required
    fieldPath: metadata.labels
`

// TestAuditWritesOpenReports: once the cluster serves the OpenReports CRDs
// (installed while shepherd runs, as an admin would; shepherd never does),
// the audit's findings appear as the namespace's Report, and the Report
// goes away when nothing in the namespace violates any more.
func TestAuditWritesOpenReports(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	serve(t)
	pcs := apply(t, podCliqueSet(ns, "pcs-unlabelled"))
	apply(t, strings.ReplaceAll(reportPolicy, "NAMESPACE", ns))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "audit-report-team"}})
	})
	// Audited before any report can be written: the CRDs are not served.
	waitViolations(t, "audit-report-team", 1)

	if err := env.InstallOpenReportsCRDs(); err != nil {
		t.Fatal(err)
	}

	// The periodic pass (every 4 s) writes the report.
	var report openreportsv1alpha1.Report
	key := client.ObjectKey{Namespace: ns, Name: api.ReportName}
	testkit.Eventually(t, timeout, "a report with one result in "+ns, func() (bool, string) {
		if err := env.Client.Get(ctx, key, &report); err != nil {
			return false, err.Error()
		}
		return len(report.Results) == 1, fmt.Sprintf("results %+v", report.Results)
	})
	r := report.Results[0]
	if r.Policy != "audit-report-team" || string(r.Result) != "fail" || r.Subjects[0].Name != "pcs-unlabelled" || r.Properties["field"] != "metadata.labels" {
		t.Errorf("result: %+v", r)
	}
	if report.Labels[api.LabelManagedBy] != api.FieldManager || report.Summary.Fail != 1 {
		t.Errorf("report labels %v, summary %+v", report.Labels, report.Summary)
	}

	// Fixed: the namespace has nothing left to report, and its report goes.
	if err := env.Client.Patch(ctx, pcs, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"vision"}}}`))); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, timeout, "the report of "+ns+" gone with its last violation", func() (bool, string) {
		err := env.Client.Get(ctx, key, &openreportsv1alpha1.Report{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
