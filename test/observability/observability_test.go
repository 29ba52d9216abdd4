package observability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// promql parses as a Prometheus server with default flags does (no
// experimental functions), so an expression that parses here loads there.
var promql = parser.NewParser(parser.Options{})

// dashboardFile and the Kustomization directory under deploy/.
const dashboardFile = "shepherd-dashboard.json"

func observabilityDir(parts ...string) string {
	return install.Dir(append([]string{"observability"}, parts...)...)
}

// grafanaVars replaces the Grafana variables the dashboard's expressions
// use by what Grafana substitutes, so that Prometheus' parser reads them as
// Prometheus will.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$job", "shepherd-webhook")

// eventSeries are metrics whose series exist only once their event happened
// (vectors without a child are not exposed at all): gang terminations and
// Training failures need Grove workloads breaking, Workloads a TrainJob on a
// cluster with the Workload API, a panic a bug. For these the test proves
// the name is registered in controller-runtime's registry, which serve
// (running in this process) exposes on /metrics.
var eventSeries = map[string]string{
	"shepherd_gang_terminations_total":      "first gang termination",
	"shepherd_gang_termination_lag_seconds": "first gang termination",
	"shepherd_training_failures_total":      "first Training PodCliqueSet marked Failed",
	"shepherd_workloads_created_total":      "first Workload created",
	"shepherd_admission_panics_total":       "first recovered panic",
	"shepherd_builtin_rule_inactive":        "first built-in rule switched off by the cluster's schemas",
	"shepherd_audit_violations":             "first stored object the background audit finds violating a rule",
	"shepherd_audit_sink_requests_total":    "first audit EventList posted to the sink (native mode)",
}

// TestPanelsAndAlertsUseExportedMetrics drives admission (one JobSet
// admitted, one denied by a WorkloadPolicy), a request the webhook turns
// away, and waits for the leader; then every metric named by a dashboard
// panel, the dashboard's variables or an alert must be in serve's /metrics
// or the apiserver's (the apiserver_admission_webhook_* series).
func TestPanelsAndAlertsUseExportedMetrics(t *testing.T) {
	ctx := context.Background()
	if err := env.Client.Create(ctx, testkit.JobSet("default", "admitted", "train:v1").Obj()); err != nil {
		t.Fatalf("creating an allowed JobSet: %v", err)
	}
	err := env.Client.Create(ctx, testkit.JobSet("default", "denied", "train:v1").Labels("team=none").Obj())
	if err == nil || !strings.Contains(err.Error(), "team none is not a team") {
		t.Fatalf("creating a JobSet %s denies: err = %v", denyPolicy, err)
	}
	turnAway(t)

	var exported map[string]bool
	testkit.Eventually(t, timeout, "serve leads and has counted the admissions", func() (bool, string) {
		exported = scrape(t, "http://"+serve.Metrics+"/metrics")
		for _, name := range []string{"leader_election_master_status", "shepherd_policy_verdicts_total", "shepherd_admission_bad_requests_total"} {
			if !exported[name] {
				return false, name + " not exported yet"
			}
		}
		return leading(t), "leader_election_master_status is not 1"
	})
	for name := range scrapeAPIServer(t) {
		exported[name] = true
	}

	used := map[string][]string{} // metric name -> where it is used
	for where, expr := range dashboardExprs(t) {
		for _, name := range metricNames(t, where, expr) {
			used[name] = append(used[name], where)
		}
	}
	for where, expr := range alertExprs(t) {
		for _, name := range metricNames(t, where, expr) {
			used[name] = append(used[name], where)
		}
	}
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and alerts: %v", len(used), used)
	}
	if registered("shepherd_no_such_metric") {
		t.Fatal("the registration probe finds a metric nobody registered")
	}
	var byRegistration []string
	for name, where := range used {
		switch {
		case exported[name]:
		case name == "up":
			// Prometheus's own series per scrape target (ShepherdDown).
		case eventSeries[baseName(name)] != "":
			byRegistration = append(byRegistration, name)
			if !registered(baseName(name)) {
				t.Errorf("%s (used by %s) is not registered with controller-runtime's registry", name, where)
			}
		default:
			t.Errorf("%s (used by %s) is not exported by shepherd serve or the apiserver", name, where)
		}
	}
	slices.Sort(byRegistration)
	t.Logf("%d metric names used; exported without series yet (registered, series at their first event): %v", len(used), byRegistration)
}

// TestAlertRules builds deploy/observability with Kustomize and checks the
// PrometheusRule: every rule is an alert whose expression parses, with a
// severity label, a valid `for`, summary and description annotations
// whose templates parse as Prometheus expands them, and a runbook_url
// naming its own section of docs/runbooks.md.
func TestAlertRules(t *testing.T) {
	rule := builtRule(t)
	runbooks := runbookSections(t)
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	var alerts []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			name, _ := r["alert"].(string)
			if name == "" {
				t.Errorf("group %v: a rule without an alert name: %v", g.(map[string]any)["name"], r)
				continue
			}
			alerts = append(alerts, name)
			if _, err := promql.ParseExpr(r["expr"].(string)); err != nil {
				t.Errorf("%s: expression does not parse: %v", name, err)
			}
			if d, _ := r["for"].(string); d != "" {
				if _, err := time.ParseDuration(d); err != nil {
					t.Errorf("%s: for %q: %v", name, d, err)
				}
			}
			sev, _, _ := unstructured.NestedString(r, "labels", "severity")
			if !slices.Contains([]string{"critical", "warning", "info"}, sev) {
				t.Errorf("%s: severity %q, want critical, warning or info", name, sev)
			}
			url, _, _ := unstructured.NestedString(r, "annotations", "runbook_url")
			if want := runbookURL + strings.ToLower(name); url != want {
				t.Errorf("%s: runbook_url %q, want %q", name, url, want)
			} else if !runbooks[strings.ToLower(name)] {
				t.Errorf("%s: runbook_url %s names no section of docs/runbooks.md", name, url)
			}
			for _, a := range []string{"summary", "description"} {
				text, _, _ := unstructured.NestedString(r, "annotations", a)
				if strings.TrimSpace(text) == "" {
					t.Errorf("%s: no %s annotation", name, a)
				} else if err := parseAlertTemplate(text); err != nil {
					t.Errorf("%s: %s annotation: %v", name, a, err)
				}
			}
		}
	}
	for _, want := range []string{"ShepherdWebhookCallsFailing", "ShepherdAdmissionErrors", "ShepherdAdmissionLatencyNearTimeout",
		"ShepherdServingCertificateExpiringSoon", "ShepherdCAExpiringSoon", "ShepherdNoLeader", "ShepherdDown", "ShepherdReconcileErrors", "ShepherdWorkloadPolicyNotCompiled"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
}

// runbookURL is where the alerts' runbooks are published: docs/runbooks.md
// on the repository's main branch, one section per alert.
const runbookURL = "https://github.com/shepherd-k8s/shepherd/blob/main/docs/runbooks.md#"

// runbookSections are the anchors of docs/runbooks.md's sections (its "##"
// headings, lowercased as GitHub makes anchors of alert names).
func runbookSections(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			out[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	return out
}

// TestDashboard checks the dashboard is importable (uid, title,
// schemaVersion, a Prometheus data-source variable every query uses), that
// every panel but a row has at least one query, and that the ConfigMap the
// Kustomization generates carries it for the Grafana sidecar.
func TestDashboard(t *testing.T) {
	d := dashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("uid %q, title %q, schemaVersion %d: all three are needed to import", d.UID, d.Title, d.SchemaVersion)
	}
	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			dsVar = true
		}
	}
	if !dsVar {
		t.Error("no datasource variable of type datasource querying prometheus")
	}
	ids := map[int]bool{}
	var panels int
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: expr %q, data source %q", p.Title, q.RefID, q.Expr, q.Datasource.UID)
			}
		}
	}
	t.Logf("%d panels", panels)

	objs, err := install.Build(observabilityDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(observabilityDir(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		found = true
		if o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s lacks the label grafana_dashboard: \"1\" the sidecar looks for", o.GetName())
		}
		if data, _, _ := unstructured.NestedString(o.Object, "data", dashboardFile); data != string(raw) {
			t.Errorf("ConfigMap %s does not carry %s as is", o.GetName(), dashboardFile)
		}
	}
	if !found {
		t.Error("the Kustomization generates no ConfigMap")
	}
}

// TestWorkloadPolicyColumns reads WorkloadPolicies as `kubectl get` does:
// the apiserver's Table, built from the CRD's printer columns.
func TestWorkloadPolicyColumns(t *testing.T) {
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/apis/shepherd.dev/v1alpha1/workloadpolicies").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		ColumnDefinitions []struct{ Name string } `json:"columnDefinitions"`
		Rows              []struct{ Cells []any } `json:"rows"`
	}
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if want := []string{"Name", "Ready", "Reason", "Action", "Violations", "Age"}; !slices.Equal(cols, want) {
		t.Fatalf("columns %v, want %v", cols, want)
	}
	want := map[string][]string{denyPolicy: {"True", "Compiled", "Deny"}, brokenPolicy: {"False", "CompileError", "Audit"}}
	for _, r := range table.Rows {
		name := fmt.Sprint(r.Cells[0])
		got := []string{fmt.Sprint(r.Cells[1]), fmt.Sprint(r.Cells[2]), fmt.Sprint(r.Cells[3])}
		if w, ok := want[name]; ok && !slices.Equal(got, w) {
			t.Errorf("%s: Ready, Reason, Action = %v, want %v", name, got, w)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("no rows for %v", want)
	}
}

// turnAway sends the validating webhook a GET, which it refuses before
// admission (shepherd_admission_bad_requests_total, reason method).
func turnAway(t *testing.T) {
	t.Helper()
	wh := env.Env.WebhookInstallOptions
	c := env.WebhookClient(t, nil)
	resp, err := c.Get("https://" + wh.LocalServingHost + ":" + strconv.Itoa(wh.LocalServingPort) + "/validate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("GET /validate: HTTP %d, want it refused", resp.StatusCode)
	}
}

// scrape returns the metric names in the text exposition at url: every
// family's # TYPE line, a histogram's with its _bucket, _sum and _count
// series, a summary's with _sum and _count.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // local test URL
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d, %v", url, resp.StatusCode, err)
	}
	return typeLines(string(b))
}

func typeLines(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		switch f[3] {
		case "histogram":
			out[f[2]+"_bucket"], out[f[2]+"_sum"], out[f[2]+"_count"] = true, true, true
		case "summary":
			out[f[2]+"_sum"], out[f[2]+"_count"] = true, true
		}
	}
	return out
}

// scrapeAPIServer returns the metric names the test apiserver exports.
func scrapeAPIServer(t *testing.T) map[string]bool {
	t.Helper()
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	b, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the apiserver's /metrics: %v", err)
	}
	return typeLines(string(b))
}

// leading reports whether serve's leader_election_master_status is 1.
func leading(t *testing.T) bool {
	resp, err := http.Get("http://" + serve.Metrics + "/metrics") //nolint:gosec // local test URL
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return regexp.MustCompile(`(?m)^leader_election_master_status\{[^}]*\} 1$`).Match(b)
}

// registered reports whether name is registered in controller-runtime's
// registry: registering another collector of that name with other help
// text is then refused as inconsistent.
func registered(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "test/observability probe"})
	if err := metrics.Registry.Register(probe); err != nil {
		var already prometheus.AlreadyRegisteredError
		return !errors.As(err, &already) // same help is impossible: any other refusal means the name is taken
	}
	metrics.Registry.Unregister(probe)
	return false
}

// baseName strips a histogram series suffix.
func baseName(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok && eventSeries[b] != "" {
			return b
		}
	}
	return name
}

// metricNames parses expr with Prometheus' PromQL parser and returns the
// metric name of every vector selector in it.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, vs)
			}
			names = append(names, name)
		}
		return nil
	})
	return names
}

type target struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []target `json:"targets"`
	} `json:"panels"`
}

func dashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(observabilityDir(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// labelValues is a Grafana variable query label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\((\w+),\s*\w+\)$`)

// dashboardExprs are the PromQL expressions of the dashboard, by panel and
// target (and variable), with Grafana's variables substituted.
func dashboardExprs(t *testing.T) map[string]string {
	d := dashboard(t)
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out[fmt.Sprintf("panel %q target %s", p.Title, q.RefID)] = grafanaVars.Replace(q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string)
			m := labelValues.FindStringSubmatch(s)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, s)
				continue
			}
			out["variable "+v.Name] = m[1]
		}
	}
	if rest := regexp.MustCompile(`\$\w+`).FindAllString(fmt.Sprint(out), -1); len(rest) > 0 {
		t.Errorf("Grafana variables the test does not substitute: %v", rest)
	}
	return out
}

func builtRule(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	objs, err := install.Build(observabilityDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" && o.GetAPIVersion() == "monitoring.coreos.com/v1" {
			return o
		}
	}
	t.Fatal("no monitoring.coreos.com/v1 PrometheusRule in the build")
	return nil
}

// alertExprs are the alert expressions, by alert name.
func alertExprs(t *testing.T) map[string]string {
	groups, _, _ := unstructured.NestedSlice(builtRule(t).Object, "spec", "groups")
	out := map[string]string{}
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			out[fmt.Sprintf("alert %v", r["alert"])], _ = r["expr"].(string)
		}
	}
	return out
}

// parseAlertTemplate parses an annotation as Prometheus expands it: Go
// text/template with $labels, $externalLabels and $value defined and
// Prometheus' template functions (stubs here: only parsing is checked).
func parseAlertTemplate(text string) error {
	stub := func(any) string { return "" }
	funcs := template.FuncMap{}
	for _, f := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "title", "toUpper", "toLower", "first", "label", "value", "safeHtml", "pathPrefix", "externalURL", "args", "tableLink", "graphLink", "strvalue", "sortByLabel", "reReplaceAll", "match", "query", "parseDuration", "stripPort", "stripDomain", "toTime", "toDuration", "now"} {
		funcs[f] = stub
	}
	header := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	_, err := template.New("annotation").Funcs(funcs).Parse(header + text)
	return err
}
