package printers

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// cellGap separates the columns tabwriter pads (at least two spaces);
// the cells themselves hold single spaces at most (oneLine).
var cellGap = regexp.MustCompile(` {2,}`)

// cells splits a table written through tabwriter into its rows' cells.
func cells(t *testing.T, table string) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range strings.Split(strings.TrimSuffix(table, "\n"), "\n") {
		out = append(out, cellGap.Split(l, -1))
	}
	return out
}

// decodeJSON decodes b with its numbers as written.
func decodeJSON(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return v
}

// TestCheckResultsText: check's text output is a line per object (its
// namespace/name, or name when cluster-scoped, and the verdict), then each
// violation indented with its action, field ("(object)" when none) and
// message naming the rule (a schema violation is "[schema]"), the layer
// answering first and the exception, then only the warnings the
// violations do not already show, then the defaulted paths.
func TestCheckResultsText(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 11, 28, 0, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		in   offline.CheckResult
		want string
	}{{
		name: "allowed, cluster-scoped, nothing to say",
		in:   offline.CheckResult{Kind: "ClusterTrainingRuntime", Name: "torch", Operation: "UPDATE", Allowed: true},
		want: "ClusterTrainingRuntime torch (UPDATE): allowed\n",
	}, {
		name: "denied, answered first upstream",
		in: offline.CheckResult{Kind: "TrainJob", Namespace: "ml", Name: "a", Operation: "CREATE", Violations: []offline.CheckViolation{
			{Rule: "V-TJ-1", Field: "spec.activeDeadlineSeconds", Message: "must be at least 1", Action: "Deny", FirstBy: "the TrainJob CRD"},
		}},
		want: "TrainJob ml/a (CREATE): DENIED\n" +
			"    deny  spec.activeDeadlineSeconds: must be at least 1 (shepherd V-TJ-1)\n" +
			"          on the cluster, answered first by the TrainJob CRD\n",
	}, {
		name: "schema violation, a message already named, no field",
		in: offline.CheckResult{Kind: "JobSet", Namespace: "ml", Name: "js", Operation: "CREATE", Violations: []offline.CheckViolation{
			{Rule: "schema", Field: "spec.bogus", Message: "unknown field", Action: "Deny"},
			{Rule: "V-JS-5", Message: "deprecated (shepherd V-JS-5)", Action: "Audit"},
		}},
		want: "JobSet ml/js (CREATE): DENIED\n" +
			"    deny  spec.bogus: unknown field [schema]\n" +
			"    audit (object): deprecated (shepherd V-JS-5)\n",
	}, {
		name: "exempt, with and without an expiry",
		in: offline.CheckResult{Kind: "TrainJob", Namespace: "legacy", Name: "old", Operation: "CREATE", Allowed: true, Violations: []offline.CheckViolation{
			{Rule: "team", Field: "metadata.labels", Message: "name a team", Action: "Exempt", Exception: "legacy", ExceptionExpires: &until},
			{Rule: "V-TJ-2", Field: "spec", Message: "too long", Action: "Exempt", Exception: "forever"},
		}},
		want: "TrainJob legacy/old (CREATE): allowed\n" +
			"    exempt metadata.labels: name a team (shepherd team)\n" +
			"          by PolicyException legacy (until 2026-11-27T23:00:00Z)\n" +
			"    exempt spec: too long (shepherd V-TJ-2)\n" +
			"          by PolicyException forever (no expiry)\n",
	}, {
		name: "warnings the violations show are not repeated",
		in: offline.CheckResult{Kind: "TrainJob", Namespace: "ml", Name: "w", Operation: "CREATE", Allowed: true,
			Violations: []offline.CheckViolation{
				{Rule: "V-A", Field: "spec.x", Message: "x is odd", Action: "Warn"},
				{Rule: "V-B", Message: "y is odd", Action: "Warn"},
				{Rule: "V-C", Field: "spec.z", Message: "z", Action: "Exempt", Exception: "e"},
			},
			Warnings: []string{"spec.x: x is odd", "y is odd", "exempt by PolicyException e (no expiry): spec.z: z", "x is odd", "the API is deprecated"},
		},
		want: "TrainJob ml/w (CREATE): allowed\n" +
			"    warn  spec.x: x is odd (shepherd V-A)\n" +
			"    warn  (object): y is odd (shepherd V-B)\n" +
			"    exempt spec.z: z (shepherd V-C)\n" +
			"          by PolicyException e (no expiry)\n" +
			"    warn  the API is deprecated\n",
	}, {
		name: "an exemption warning without an exempt violation is printed",
		in:   offline.CheckResult{Kind: "TrainJob", Name: "w", Operation: "CREATE", Allowed: true, Warnings: []string{"exempt by PolicyException e (no expiry): z"}},
		want: "TrainJob w (CREATE): allowed\n" +
			"    warn  exempt by PolicyException e (no expiry): z\n",
	}, {
		name: "defaulted paths",
		in: offline.CheckResult{Kind: "PodCliqueSet", Namespace: "ml", Name: "p", Operation: "CREATE", Allowed: true, Patch: []jsonpatch.JsonPatchOperation{
			{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{"a": "b"}},
			{Operation: "replace", Path: "/spec/replicas", Value: 1},
		}},
		want: "PodCliqueSet ml/p (CREATE): allowed\n" +
			"    defaulted: add /metadata/annotations, replace /spec/replicas\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := CheckResults(&b, "text", []offline.CheckResult{tc.in}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckResultsJSONAndYAML: -o json and -o yaml write the results
// themselves, which read back as they were (and never the text).
func TestCheckResultsJSONAndYAML(t *testing.T) {
	t.Parallel()
	results := []offline.CheckResult{{
		APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ml", Name: "a", Operation: "CREATE",
		Violations: []offline.CheckViolation{{Rule: "V-TJ-1", Field: "spec.activeDeadlineSeconds", Message: "must be at least 1", Action: "Deny"}},
		Warnings:   []string{"on"},
		Patch:      []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/x", Value: "yes"}},
		Object:     map[string]any{"kind": "TrainJob", "spec": map[string]any{"x": "yes", "big": int64(9007199254740993)}},
	}}
	want, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "yaml"} {
		var b bytes.Buffer
		if err := CheckResults(&b, format, results); err != nil {
			t.Fatal(err)
		}
		// sigs.k8s.io/yaml reads JSON too, and YAML as kubectl does.
		got, err := yaml.YAMLToJSON(b.Bytes())
		if err != nil {
			t.Fatalf("-o %s does not parse: %v\n%s", format, err, b.String())
		}
		if diff := cmp.Diff(decodeJSON(t, want), decodeJSON(t, got)); diff != "" {
			t.Errorf("-o %s read back (-want +got):\n%s", format, diff)
		}
		if format == "json" && !json.Valid(b.Bytes()) {
			t.Errorf("-o json is not JSON:\n%s", b.String())
		}
	}
}

// TestYAMLStyle: YAML sorts keys, quotes the strings a YAML 1.1 reader
// would take for a boolean or a base-60 number (and only those), keeps
// numbers as JSON wrote them (integers beyond float64's precision too),
// and writes values below maxIndentDepth in flow style.
func TestYAMLStyle(t *testing.T) {
	t.Parallel()
	v := map[string]any{
		"s": []any{"yes", "on", "N", "off", "1:30", "-2:05:59.5", "yesterday", "12:61", "1.5", "plain"},
		"i": int64(9007199254740993), "f": 1.5, "e": 1e21, "t": true, "z": nil, "m": map[string]any{}, "l": []any{},
		"nested": map[string]any{"b": 1, "a": 2},
		// Map keys as a label's or a ConfigMap's: quoted as values are.
		"keys": map[string]any{"n": "x", "yes": "x", "1:30": "x", "no-op": "x"},
	}
	want := `e: 1e+21
f: 1.5
i: 9007199254740993
keys:
  "1:30": x
  "n": x
  no-op: x
  "yes": x
l: []
m: {}
nested:
  a: 2
  b: 1
s:
- "yes"
- "on"
- "N"
- "off"
- "1:30"
- "-2:05:59.5"
- yesterday
- 12:61
- "1.5"
- plain
t: true
z: null
`
	var b bytes.Buffer
	if err := YAML(&b, v); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// What a YAML 1.1 reader gets back is what JSON says.
	wantJSON, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, err := yaml.YAMLToJSON(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(decodeJSON(t, wantJSON), decodeJSON(t, gotJSON)); diff != "" {
		t.Errorf("read back by sigs.k8s.io/yaml (-want +got):\n%s", diff)
	}

	// 36 maps nested: the first maxIndentDepth in block style, a line
	// each, the rest on the last line.
	var deep any = 1
	for range 36 {
		deep = map[string]any{"a": deep}
	}
	var wantDeep strings.Builder
	for i := range maxIndentDepth - 1 {
		wantDeep.WriteString(strings.Repeat("  ", i) + "a:\n")
	}
	wantDeep.WriteString(strings.Repeat("  ", maxIndentDepth-1) + "a: {a: {a: {a: {a: 1}}}}\n")
	b.Reset()
	if err := YAML(&b, deep); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDeep.String(), b.String()); diff != "" {
		t.Errorf("36 levels (-want +got):\n%s", diff)
	}
}

// TestAuditTable: the audit ring's table has a row per verdict: its time
// in UTC, namespace/name (name alone when cluster-scoped), "-" for no
// field, the message on one line and who exempted it until when; an
// empty ring says so.
func TestAuditTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := AuditTable(&b, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("No verdicts recorded.\n", b.String()); diff != "" {
		t.Errorf("empty ring (-want +got):\n%s", diff)
	}

	t0 := time.Date(2026, 11, 22, 13, 0, 0, 0, time.FixedZone("CET", 3600))
	until := t0.Add(24 * time.Hour)
	b.Reset()
	err := AuditTable(&b, []audit.Record{
		{Time: t0, User: "alice", Operation: "CREATE", Kind: "TrainJob", Namespace: "research", Name: "tj", Rule: "V-TJ-1", Action: "Deny", Field: "spec.activeDeadlineSeconds", Message: "must be at least 1"},
		{Time: t0.Add(time.Minute), User: "bob", Operation: "UPDATE", Kind: "ClusterTrainingRuntime", Name: "torch", Rule: "V-CTR-1", Action: "Warn", Message: "startupPolicy is\n  deprecated\t", DryRun: true},
		{Time: t0.Add(2 * time.Minute), User: "carol", Operation: "CREATE", Kind: "TrainJob", Namespace: "legacy", Name: "old", Rule: "V-TJ-2", Action: "Exempt", Field: "spec", Message: "too long", Exception: "legacy-jobs", ExceptionExpires: &until},
		{Time: t0.Add(3 * time.Minute), User: "dave", Operation: "CREATE", Kind: "JobSet", Namespace: "p", Name: "js", Rule: "team", Action: "Exempt", Message: "name a team", Exception: "always"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"TIME", "ACTION", "RULE", "OPERATION", "KIND", "OBJECT", "USER", "DRY-RUN", "FIELD", "MESSAGE"},
		{"2026-11-22T12:00:00Z", "Deny", "V-TJ-1", "CREATE", "TrainJob", "research/tj", "alice", "false", "spec.activeDeadlineSeconds", "must be at least 1"},
		{"2026-11-22T12:01:00Z", "Warn", "V-CTR-1", "UPDATE", "ClusterTrainingRuntime", "torch", "bob", "true", "-", "startupPolicy is deprecated"},
		{"2026-11-22T12:02:00Z", "Exempt", "V-TJ-2", "CREATE", "TrainJob", "legacy/old", "carol", "false", "spec", "too long [exempt by PolicyException legacy-jobs, until 2026-11-23T12:00:00Z]"},
		{"2026-11-22T12:03:00Z", "Exempt", "team", "CREATE", "JobSet", "p/js", "dave", "false", "-", "name a team [exempt by PolicyException always, no expiry]"},
	}
	if diff := cmp.Diff(want, cells(t, b.String())); diff != "" {
		t.Errorf("table (-want +got):\n%s\n%s", diff, b.String())
	}
}

// TestImpactText: audit --policy's report says what each rule would do to
// how many objects ("fails on" for an action without a verb), then lists
// the violations in a table, or stops when there are none.
func TestImpactText(t *testing.T) {
	t.Parallel()
	rules := []offline.ImpactPolicy{
		{Rule: "a", Action: "Deny", ViolatingObjects: 2},
		{Rule: "b", Action: "Warn", ViolatingObjects: 1},
		{Rule: "c", Action: "Audit", ViolatingObjects: 0},
		{Rule: "d", Action: "Exempt", ViolatingObjects: 1},
	}
	summary := "Judged 3 stored objects from the files as creates.\n" +
		"a (Deny): would deny 2 of them\n" +
		"b (Warn): would warn on 1 of them\n" +
		"c (Audit): would audit 0 of them\n" +
		"d (Exempt): fails on 1 of them\n"

	var b bytes.Buffer
	if err := Impact(&b, &offline.ImpactReport{Source: "the files", Evaluated: 3, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(summary, b.String()); diff != "" {
		t.Errorf("no objects (-want +got):\n%s", diff)
	}

	b.Reset()
	err := Impact(&b, &offline.ImpactReport{Source: "the files", Evaluated: 3, Rules: rules, Objects: []offline.ImpactObject{
		{Kind: "TrainJob", Namespace: "ml", Name: "x", Violations: []offline.ImpactViolation{
			{Rule: "a", Action: "Deny", Field: "metadata.labels", Message: "name\na team"},
			{Rule: "d", Action: "Exempt", Message: "no field", Exception: "e"},
		}},
		{Kind: "ClusterTrainingRuntime", Name: "rt", Violations: []offline.ImpactViolation{{Rule: "b", Action: "Warn", Field: "spec", Message: "odd"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	head, table, ok := strings.Cut(b.String(), "\n\n")
	if !ok || head+"\n" != summary {
		t.Fatalf("the summary and a blank line do not come first:\n%s", b.String())
	}
	want := [][]string{
		{"KIND", "OBJECT", "RULE", "ACTION", "FIELD", "MESSAGE"},
		{"TrainJob", "ml/x", "a", "Deny", "metadata.labels", "name a team"},
		{"TrainJob", "ml/x", "d", "Exempt", "-", "no field"},
		{"ClusterTrainingRuntime", "rt", "b", "Warn", "spec", "odd"},
	}
	if diff := cmp.Diff(want, cells(t, table)); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestRulesTable: export rules' table says whether a rule exports (a
// defaulting rule as a MutatingAdmissionPolicy; when not, the first clause
// of why) and whether it is enabled.
func TestRulesTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	err := RulesTable(&b, []celrules.RuleInfo{
		{ID: "V-TJ-1", Kinds: []string{"TrainJob"}, Action: "Deny", Exportable: true, Enabled: true, OnUpdate: "any change", Description: "a deadline of at least 1"},
		{ID: "D-PCS-6", Kinds: []string{"PodCliqueSet"}, Action: "Default", Exportable: true, Enabled: false, OnUpdate: "never", Description: "minAvailable"},
		{ID: "V-TJ-3", Kinds: []string{"TrainJob", "JobSet"}, Action: "Deny", Reason: "needs lookups; a policy cannot read other objects", Enabled: true, OnUpdate: "spec", Description: "the runtime exists"},
		{ID: "V-X", Kinds: []string{"JobSet"}, Action: "Warn", Reason: "reads the request (dryRun)", Enabled: true, OnUpdate: "-", Description: "x"},
		{ID: "V-Y", Kinds: []string{"JobSet"}, Action: "Warn", Reason: "(no reason)", Enabled: true, OnUpdate: "-", Description: "y"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"ID", "KINDS", "ACTION", "EXPORTABLE", "ENABLED", "JUDGES AN UPDATE OF", "DESCRIPTION"},
		{"V-TJ-1", "TrainJob", "Deny", "yes", "yes", "any change", "a deadline of at least 1"},
		{"D-PCS-6", "PodCliqueSet", "Default", "yes (MAP)", "no", "never", "minAvailable"},
		{"V-TJ-3", "TrainJob,JobSet", "Deny", "no: needs lookups", "yes", "spec", "the runtime exists"},
		{"V-X", "JobSet", "Warn", "no: reads the request", "yes", "-", "x"},
		// A reason that starts with its delimiter is kept whole.
		{"V-Y", "JobSet", "Warn", "no: (no reason)", "yes", "-", "y"},
	}
	if diff := cmp.Diff(want, cells(t, b.String())); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestVersionText: shepherd version's text is two lines: the version, Go
// and platform, then every upstream it is tested with.
func TestVersionText(t *testing.T) {
	t.Parallel()
	v := VersionInfo{Version: "v1.2.3", Go: "go1.99", Platform: "linux/arm64", TestedWith: TestedUpstreams{
		Trainer:    UpstreamModule{Version: "v2.0.0", Module: "github.com/kubeflow/trainer/v2"},
		JobSet:     UpstreamModule{Version: "v0.9.0", Module: "sigs.k8s.io/jobset"},
		Grove:      "v0.1.0",
		Kubernetes: "v1.37.1",
	}}
	var b bytes.Buffer
	if err := Version(&b, "text", v); err != nil {
		t.Fatal(err)
	}
	want := "shepherd v1.2.3 (go1.99, linux/arm64)\n" +
		"tested with: Kubeflow Trainer v2.0.0 (github.com/kubeflow/trainer/v2), JobSet v0.9.0 (sigs.k8s.io/jobset), Grove v0.1.0, Kubernetes v1.37.1\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
