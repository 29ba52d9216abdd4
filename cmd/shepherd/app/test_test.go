package app

import (
	"encoding/json"
	"encoding/xml"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/policytest"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// repoRoot is the repository, seen from this package's directory.
var repoRoot = filepath.Join("..", "..", "..")

var (
	shippedSuites   = filepath.Join(repoRoot, "celrules", "rules", "tests")
	examplePolicies = filepath.Join(repoRoot, "examples", "policies")
	failingSuites   = filepath.Join(repoRoot, "policytest", "testdata", "failing")
	badSuites       = filepath.Join(repoRoot, "policytest", "testdata", "bad")
)

func TestPolicyTestShippedSuitesPass(t *testing.T) {
	code, out, errOut := runMain("test", shippedSuites, examplePolicies)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (every shipped case passes)\n%s%s", code, out, errOut)
	}
	files, err := policytest.Discover([]string{shippedSuites, examplePolicies})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Errorf("%d shipped suites, want at least 7: %v", len(files), files)
	}
	for _, f := range files {
		if !strings.Contains(out, "ok   "+f+": ") {
			t.Errorf("output has no ok line for %s:\n%s", f, out)
		}
	}
	if !strings.Contains(out, "PASS: ") {
		t.Errorf("no PASS summary:\n%s", out)
	}
}

// TestPolicyTestShippedSuitesCoverEveryBuiltInRule keeps the shipped suites
// from going stale: every rule the chain has (built-in CEL rules, Go checks
// and defaulters) is covered by a case that makes it fire and one that
// does not, and every rule a case names exists. The suites pass
// (TestPolicyTestShippedSuitesPass), so a case expecting a rule to fire
// fails when the rule stops firing.
func TestPolicyTestShippedSuitesCoverEveryBuiltInRule(t *testing.T) {
	cfg, err := (&ruleConfigFlags{}).config()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := offline.NewChain(cfg, nil, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, r := range chain.Rules() {
		if r.Source != celrules.SourcePolicy {
			rules[r.ID] = true
		}
	}
	if len(rules) < 30 {
		t.Fatalf("the chain lists %d built-in rules; want them all", len(rules))
	}
	// Rules that cannot fire with the shipped configuration, and why.
	neverFires := map[string]string{
		"D-PCS-5": "defaults only with a configured Inference terminationDelay; none is shipped",
	}
	files, err := policytest.Discover([]string{shippedSuites})
	if err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string][]string{}, map[string][]string{}
	for _, f := range files {
		s, err := policytest.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.Cases {
			where := f + ": " + c.Name
			if len(c.Covers) == 0 {
				t.Errorf("%s: covers no rule; name the rules it exercises", where)
			}
			for _, id := range c.Covers {
				if !rules[id] {
					t.Errorf("%s: covers %s, which is no rule of the chain", where, id)
					continue
				}
				if caseFires(c, id) {
					fires[id] = append(fires[id], where)
				} else {
					quiet[id] = append(quiet[id], where)
				}
			}
		}
	}
	ids := make([]string, 0, len(rules))
	for id := range rules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if len(fires[id]) == 0 && neverFires[id] == "" {
			t.Errorf("%s: no shipped case expects it to fire (a violation of it, or a value it defaults)", id)
		}
		if len(quiet[id]) == 0 {
			t.Errorf("%s: no shipped case covers it not firing", id)
		}
	}
}

// caseFires reports whether c expects rule id to fire: a violation of a
// validation rule, or for a defaulter a value the object did not have.
func caseFires(c policytest.Case, id string) bool {
	if !strings.HasPrefix(id, "D-") {
		for _, v := range c.Expect.Violations {
			if v.Rule == id {
				return true
			}
		}
		return false
	}
	for _, d := range c.Expect.Defaults {
		if d.Value == nil {
			continue
		}
		if before, found := d.Lookup(c.Object.Object); !found || !reflect.DeepEqual(before, d.Value) {
			return true
		}
	}
	return false
}

func TestPolicyTestShippedSuitesFailWhenTheirRuleIsOff(t *testing.T) {
	code, out, _ := runMain("test", shippedSuites, "--disable-rule", "V-TJ-1,D-PCS-3")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"--- FAIL: tj-deadline-zero (",
		"missing violation V-TJ-1 at spec.activeDeadlineSeconds",
		"--- FAIL: pcs-training-restart-policy-defaulted (",
		"the object after defaulting differs at spec.template.cliques[0].spec.podSpec.restartPolicy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPolicyTestFailingSuitesReportEachMismatch runs one failing suite per
// kind of mismatch and checks that each fails (exit 1) with exactly that
// mismatch.
func TestPolicyTestFailingSuitesReportEachMismatch(t *testing.T) {
	for _, tc := range []struct {
		file string
		kind []string
		msg  string
	}{
		{"allowed-test.yaml", []string{policytest.MismatchAllowed}, "expected allowed, got denied"},
		{"missing-violation-test.yaml", []string{policytest.MismatchMissingViolation}, "missing violation V-TJ-1 at spec.activeDeadlineSeconds"},
		{"violation-message-test.yaml", []string{policytest.MismatchMissingViolation}, `with a message containing "at most 86400"; got V-TJ-1 at spec.activeDeadlineSeconds (Deny): activeDeadlineSeconds must be at least 1, got 0`},
		{"unexpected-violation-test.yaml", []string{policytest.MismatchUnexpectedViolation}, "unexpected violation V-TR-2 at metadata.annotations['shepherd.dev/ttl-seconds-after-finished'] (Warn)"},
		{"missing-warning-test.yaml", []string{policytest.MismatchMissingWarning}, `missing warning containing "deprecated"; got no warnings`},
		{"unexpected-warning-test.yaml", []string{policytest.MismatchUnexpectedWarning}, `unexpected warning "spec.startupPolicy: startupPolicyOrder InOrder is deprecated`},
		{"defaults-test.yaml", []string{policytest.MismatchDefaults}, "the object after defaulting differs at spec.template.cliques[0].spec.podSpec.restartPolicy, spec.template.cliques[0].spec.minAvailable"},
		{"object-test.yaml", []string{policytest.MismatchObject}, "the object after defaulting does not contain expect.object"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			file := filepath.Join(failingSuites, tc.file)
			code, out, errOut := runMain("test", file, "-o", "json")
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			var r policytest.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if r.Failed != 1 || r.Passed != 0 || len(r.Suites) != 1 || len(r.Suites[0].Cases) != 1 {
				t.Fatalf("report = %+v", r)
			}
			c := r.Suites[0].Cases[0]
			var kinds []string
			for _, m := range c.Mismatches {
				kinds = append(kinds, m.Kind)
			}
			if diff := cmp.Diff(tc.kind, kinds); diff != "" {
				t.Errorf("mismatch kinds (-want +got):\n%s\n%+v", diff, c.Mismatches)
			}
			if len(c.Mismatches) > 0 && !strings.Contains(c.Mismatches[0].Message, tc.msg) {
				t.Errorf("mismatch = %q, want it to contain %q", c.Mismatches[0].Message, tc.msg)
			}
			// The text output says the same, at the case's file and line.
			_, text, _ := runMain("test", file)
			if !strings.Contains(text, tc.msg) || !strings.Contains(text, "("+file+":") {
				t.Errorf("text output lacks %q or the position:\n%s", tc.msg, text)
			}
		})
	}
}

func TestPolicyTestDefaultsMismatchShowsADiff(t *testing.T) {
	_, out, _ := runMain("test", filepath.Join(failingSuites, "defaults-test.yaml"))
	for _, want := range []string{
		"diff (-want +got):",
		`- 	"spec.template.cliques[0].spec.podSpec.restartPolicy": string("OnFailure"),`,
		`+ 	"spec.template.cliques[0].spec.podSpec.restartPolicy": string("Never"),`,
		`+ 	"spec.template.cliques[0].spec.minAvailable":          int64(2),`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPolicyTestJUnitOutput(t *testing.T) {
	code, out, _ := runMain("test", failingSuites, "-o", "junit")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var got struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Tests != 8 || got.Failures != 8 || len(got.Suites) != 8 {
		t.Fatalf("testsuites: %d tests, %d failures, %d suites; want 8 each\n%s", got.Tests, got.Failures, len(got.Suites), out)
	}
	s := got.Suites[0]
	if s.Name != filepath.Join(failingSuites, "allowed-test.yaml") || len(s.Cases) != 1 || s.Cases[0].Name != "zero-deadline-expected-allowed" ||
		s.Cases[0].Failure == nil || s.Cases[0].Failure.Message != "expected allowed, got denied" ||
		!strings.Contains(s.Cases[0].Failure.Text, s.Name+":6: TrainJob default/tj CREATE\nexpected allowed, got denied") {
		t.Errorf("first testsuite = %+v", s)
	}
}

// TestPolicyTestBadSuitesAreExit2WithFileAndLine: a suite that cannot be
// loaded stops the run before any case runs, naming the file and line.
func TestPolicyTestBadSuitesAreExit2WithFileAndLine(t *testing.T) {
	for file, want := range map[string][]string{
		"unknown-key-test.yaml":  {`unknown-key-test.yaml:11: unknown key "violation" in expect; its keys are: allowed, violations, warnings, defaults, object`},
		"malformed-test.yaml":    {`malformed-test.yaml:5: invalid YAML: did not find expected ',' or '}'`},
		"missing-file-test.yaml": {`missing-file-test.yaml:3: policies: policy.yaml: no such file or directory`, `missing-file-test.yaml:6: case "from-file": objectFile trainjob.yaml: no such file or directory`},
		"wrong-type-test.yaml":   {`wrong-type-test.yaml:6: want true or false, got a string (maybe)`, `wrong-type-test.yaml:11: the object (apiVersion v1) has no kind`},
	} {
		code, out, errOut := runMain("test", filepath.Join(badSuites, file))
		if code != 2 || out != "" {
			t.Errorf("%s: exit %d, want 2 with no results\n%s", file, code, out)
		}
		for _, w := range want {
			if !strings.Contains(errOut, filepath.Join(badSuites, w)) {
				t.Errorf("%s: stderr lacks %q:\n%s", file, w, errOut)
			}
		}
	}
	// Every broken suite is reported at once; none runs.
	code, out, errOut := runMain("test", badSuites, shippedSuites)
	if code != 2 || out != "" || strings.Count(errOut, "-test.yaml:") < 5 {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

func TestPolicyTestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"test"},
		{"test", shippedSuites, "-o", "xml"},
		{"test", shippedSuites, "--timeout", "0s"},
		{"test", filepath.Join(repoRoot, "api")},
		{"test", "no/such/dir"},
	} {
		if code, _, errOut := runMain(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errOut)
		}
	}
}

// --run selects cases by name, or SUITE/NAME, as go test -run does; a
// suite none of whose cases matches is left out; an expression that does
// not compile, or matches nothing, is a usage error.
func TestPolicyTestRunSelectsCases(t *testing.T) {
	code, out, errOut := runMain("test", shippedSuites, "--run", "^tj-deadline-(valid|zero)$", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	var report struct {
		Suites []policytest.SuiteResult `json:"suites"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	results := report.Suites
	var got []string
	for _, r := range results {
		for _, c := range r.Cases {
			got = append(got, c.Name)
		}
	}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"tj-deadline-valid", "tj-deadline-zero"}, got); diff != "" {
		t.Errorf("cases run (-want +got):\n%s", diff)
	}
	if len(results) != 1 || filepath.Base(results[0].File) != "trainjob-test.yaml" {
		t.Errorf("suites reported %d, want only trainjob-test.yaml's", len(results))
	}

	// SUITE/NAME: the suite's display name (here its file) before the case.
	code, out, errOut = runMain("test", shippedSuites, "--run", "trainjob-test.yaml/tj-deadline-valid$", "-o", "json")
	if code != 0 || !strings.Contains(out, `"tj-deadline-valid"`) || strings.Contains(out, `"tj-deadline-zero"`) {
		t.Errorf("--run SUITE/NAME: exit %d, output %s%s", code, out, errOut)
	}

	for _, run := range []string{"(", "no-case-is-named-so"} {
		if code, _, errOut := runMain("test", shippedSuites, "--run", run); code != 2 || !strings.Contains(errOut, "--run") {
			t.Errorf("--run %q: exit %d, stderr %q; want 2 naming --run", run, code, errOut)
		}
	}
}

func TestPolicyTestTimeoutIsACaseError(t *testing.T) {
	code, out, _ := runMain("test", filepath.Join(shippedSuites, "trainjob-test.yaml"), "--timeout", "1ns")
	if code != 1 || !strings.Contains(out, "error: admission did not finish within --timeout=1ns") {
		t.Errorf("exit %d, want 1 with each case's timeout:\n%s", code, out)
	}
}

// TestPolicyTestJudgesAsCheckDoes: a suite runs through check's chain — the
// schema's unknown fields (denied under Strict, warned under Warn), the
// policies, the lookups of the context.
func TestPolicyTestJudgesAsCheckDoes(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	testkit.WriteFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: short-jobs}
spec:
  action: Warn
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]
  validations:
  - expression: "object.spec.?activeDeadlineSeconds.orValue(0) <= 1800"
    message: "keep TrainJobs under half an hour"
    fieldPath: spec.activeDeadlineSeconds
`)
	suite := func(validation string) string {
		return `apiVersion: shepherd.dev/v1alpha1
kind: PolicyTest
policies: [policy.yaml]
context: [rt.yaml]
fieldValidation: ` + validation + `
cases:
- name: seed-field-and-long-deadline
  object:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {name: tj}
    spec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 3600, bogus: 1}
  expect:
    allowed: false
    violations:
    - {rule: schema, field: spec.bogus, action: Deny}
    - {rule: short-jobs, field: spec.activeDeadlineSeconds, message: half an hour}
- name: missing-runtime
  object:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {name: tj}
    spec: {runtimeRef: {name: nope}}
  expect:
    allowed: false
    violations: [{rule: V-TJ-3, field: spec.runtimeRef}]
`
	}
	strict := testkit.WriteFile(t, dir, "strict-test.yaml", suite("Strict"))
	if code, out, errOut := runMain("test", strict); code != 0 {
		t.Errorf("Strict: exit %d\n%s%s", code, out, errOut)
	}
	// Under Warn the unknown field is a warning, so the Strict suite's
	// expectations no longer hold.
	warn := testkit.WriteFile(t, dir, "warn-test.yaml", suite("Warn"))
	code, out, _ := runMain("test", warn)
	if code != 1 || !strings.Contains(out, "expected denied, got allowed") || !strings.Contains(out, "missing violation schema at spec.bogus (Deny); got schema at spec.bogus (Warn)") {
		t.Errorf("Warn: exit %d\n%s", code, out)
	}
}

func TestPolicyTestOldObjectMustBeTheSameObject(t *testing.T) {
	dir := t.TempDir()
	file := testkit.WriteFile(t, dir, "old-test.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: PolicyTest
cases:
- name: renamed
  object: {apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: a}, spec: {runtimeRef: {name: torch}}}
  oldObject: {apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: b}, spec: {runtimeRef: {name: torch}}}
  expect: {allowed: true}
`)
	code, _, errOut := runMain("test", file)
	if code != 2 || !strings.Contains(errOut, file+`:4: case "renamed": the old object is another object (name "b", not "a")`) {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}

func TestPolicyTestPolicyThatDoesNotCompileIsExit2(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: broken}
spec:
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]
  validations:
  - expression: "object.spec.noSuchField == 1"
`)
	file := testkit.WriteFile(t, dir, "p-test.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: PolicyTest
policies: [policy.yaml]
cases:
- name: any
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}
  expect: {allowed: true}
`)
	code, _, errOut := runMain("test", file)
	if code != 2 || !strings.Contains(errOut, file+`: WorkloadPolicy "broken" does not compile`) {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}
