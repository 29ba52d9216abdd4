package reports

import (
	"cmp"
	"sort"
	"strconv"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
)

// Finding is one rule a stored object currently violates.
type Finding struct {
	APIVersion string
	Kind       string
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
	UID       types.UID
	// Rule is a built-in rule ID (V-TJ-1) or a WorkloadPolicy's name.
	Rule string
	// Action is the rule's action: Deny, Warn or Audit.
	Action  string
	Field   string
	Message string
	// Found is when the audit first found this violation; a result keeps
	// it, so an unchanged finding is an unchanged report.
	Found time.Time
}

// DefaultMaxResults bounds the results of one report: at a few hundred
// bytes each, far below etcd's object size limit, and more than a person
// reads; the summary still counts every violation.
const DefaultMaxResults = 500

// AnnotationOmitted on a report says how many results were left out.
const AnnotationOmitted = "shepherd.dev/results-omitted"

// Desired is the report of every namespace with findings ("" for the
// ClusterReport's cluster-scoped objects), each holding at most
// maxResults results in a stable order (kind, namespace, name, rule,
// field), so that the same findings always give the same report.
func Desired(findings []Finding, maxResults int) map[string]*openreportsv1alpha1.Report {
	if maxResults <= 0 {
		maxResults = DefaultMaxResults
	}
	byNS := map[string][]Finding{}
	for _, f := range findings {
		byNS[f.Namespace] = append(byNS[f.Namespace], f)
	}
	out := make(map[string]*openreportsv1alpha1.Report, len(byNS))
	for ns, fs := range byNS {
		sort.Slice(fs, func(i, j int) bool { return less(&fs[i], &fs[j]) })
		r := &openreportsv1alpha1.Report{
			ObjectMeta: metav1.ObjectMeta{
				Name:      api.ReportName,
				Namespace: ns,
				Labels:    map[string]string{api.LabelManagedBy: api.FieldManager},
			},
			Source: api.ReportSource,
			Configuration: &openreportsv1alpha1.ReportConfiguration{
				Limits: openreportsv1alpha1.Limits{MaxResults: maxResults},
			},
		}
		for i := range fs {
			res := result(&fs[i])
			switch res.Result {
			case ResultFail:
				r.Summary.Fail++
			default:
				r.Summary.Warn++
			}
			if i < maxResults {
				r.Results = append(r.Results, res)
			}
		}
		if omitted := len(fs) - len(r.Results); omitted > 0 {
			r.Annotations = map[string]string{AnnotationOmitted: strconv.Itoa(omitted)}
		}
		out[ns] = r
	}
	return out
}

// OpenReports result values and severities shepherd uses.
const (
	ResultFail = openreportsv1alpha1.Result("fail")
	ResultWarn = openreportsv1alpha1.Result("warn")
)

// result maps a finding to a report result: a Deny rule's violation is a
// failure (high severity: it would not be admitted today), a Warn or Audit
// rule's a warning.
func result(f *Finding) openreportsv1alpha1.ReportResult {
	r := openreportsv1alpha1.ReportResult{
		Source:      api.ReportSource,
		Policy:      f.Rule,
		Result:      ResultWarn,
		Severity:    "medium",
		Scored:      true,
		Timestamp:   metav1.Timestamp{Seconds: f.Found.Unix()},
		Description: f.Message,
		Subjects: []corev1.ObjectReference{{
			APIVersion: f.APIVersion, Kind: f.Kind, Namespace: f.Namespace, Name: f.Name, UID: f.UID,
		}},
		Properties: map[string]string{"action": f.Action},
	}
	if f.Action == "Deny" {
		r.Result, r.Severity = ResultFail, "high"
	}
	if f.Action == "Audit" {
		r.Severity = "low"
	}
	if f.Field != "" {
		r.Properties["field"] = f.Field
	}
	return r
}

func less(a, b *Finding) bool {
	return cmp.Or(
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Rule, b.Rule),
		cmp.Compare(a.Field, b.Field),
	) < 0
}
