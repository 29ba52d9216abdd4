package policytest

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

const header = "apiVersion: shepherd.dev/v1alpha1\nkind: PolicyTest\n"

const trainJob = `    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    metadata: {name: tj}
    spec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 0}
`

func TestParseReadsASuite(t *testing.T) {
	s, err := Parse("s-test.yaml", []byte(header+`name: deadlines
context: [runtimes.yaml]
cases:
- name: zero
  covers: [V-TJ-1]
  object:
`+trainJob+`  expect:
    allowed: false
    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, message: at least}]
    warnings: [soon]
    defaults: {"metadata.annotations['shepherd.dev/x']": "1", spec.x: null}
    object: {spec: {runtimeRef: {name: torch}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.DisplayName() != "deadlines" || len(s.Context) != 1 || s.Context[0].Path != "runtimes.yaml" || s.Context[0].Line != 4 {
		t.Errorf("suite header = %q, context %+v", s.DisplayName(), s.Context)
	}
	c := s.Cases[0]
	if c.Name != "zero" || c.Line != 6 || c.Operation != "CREATE" || *c.Expect.Allowed {
		t.Errorf("case = %+v", c)
	}
	// Integers are int64, as apimachinery decodes them: DeepCopy panics on
	// any other integer type.
	if got := c.Object.DeepCopy().Object["spec"].(map[string]any)["activeDeadlineSeconds"]; got != int64(0) {
		t.Errorf("activeDeadlineSeconds = %#v, want int64(0)", got)
	}
	want := Defaults{{Path: "metadata.annotations['shepherd.dev/x']", Value: "1", Line: 17}, {Path: "spec.x", Value: nil, Line: 17}}
	if diff := cmp.Diff(want, c.Expect.Defaults, cmp.Comparer(func(a, b Default) bool {
		return a.Path == b.Path && reflect.DeepEqual(a.Value, b.Value) && a.Line == b.Line
	})); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if v := c.Expect.Violations[0]; v != (ExpectedViolation{Rule: "V-TJ-1", Field: "spec.activeDeadlineSeconds", Message: "at least"}) {
		t.Errorf("violation = %+v", v)
	}
}

func TestParseOperationDefaultsToUpdateWithAnOldObject(t *testing.T) {
	s, err := Parse("s-test.yaml", []byte(header+"cases:\n- name: u\n  object:\n"+trainJob+"  oldObject:\n"+trainJob+"  expect: {allowed: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cases[0].Operation != "UPDATE" {
		t.Errorf("operation = %q, want UPDATE", s.Cases[0].Operation)
	}
}

// TestParseErrorsNameFileLineAndFix: every way a suite can be wrong is an
// error at the line of the mistake, saying what to do.
func TestParseErrorsNameFileLineAndFix(t *testing.T) {
	obj := "  object:\n" + trainJob // lines 5-9 of a first case at line 4; expect at 10
	for _, tc := range []struct {
		name, suite string
		want        []string
	}{
		{"unknown key in expect", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    violation: []\n",
			[]string{`s-test.yaml:12: unknown key "violation" in expect; its keys are: allowed, violations, warnings, defaults, object`}},
		{"unknown key in a case", header + "cases:\n- name: a\n  objekt: {}\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: unknown key "objekt" in a case; its keys are: name, covers, operation, object, objectFile, oldObject, oldObjectFile, expect`}},
		{"unknown top-level key", header + "polices: [p.yaml]\ncases: []\n",
			[]string{`s-test.yaml:3: unknown key "polices" in a suite; its keys are: apiVersion, kind, name, description, policies, context, crds, noWorkloadAPI, fieldValidation, cases`}},
		{"wrong type", header + "cases:\n- name: a\n" + obj + "  expect: {allowed: maybe}\n",
			[]string{`s-test.yaml:10: want true or false, got a string (maybe)`}},
		{"a list where a mapping goes", header + "cases:\n- name: a\n" + obj + "  expect: [allowed]\n",
			[]string{`s-test.yaml:10: want a mapping (allowed, violations, warnings, defaults, object), got a list`}},
		{"wrong header", "apiVersion: v1\nkind: PolicyTest\ncases:\n- name: a\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:1: a suite starts with apiVersion: shepherd.dev/v1alpha1 and kind: PolicyTest (got "v1" and "PolicyTest")`}},
		{"no cases", header + "cases: []\n",
			[]string{`s-test.yaml:3: the suite has no cases`}},
		{"no name, no object, no expect", header + "cases:\n- operation: CREATE\n",
			[]string{`s-test.yaml:4: case 1: no name`, `s-test.yaml:4: case 1: no object; add object: {...} (inline) or objectFile: FILE`, `s-test.yaml:4: case 1: no expect`}},
		{"duplicate names", header + "cases:\n- name: a\n" + obj + "  expect: {allowed: true}\n- name: a\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:11: case "a": the name is also that of the case at line 4`}},
		{"object and objectFile", header + "cases:\n- name: a\n" + obj + "  objectFile: tj.yaml\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:10: case "a": both object and objectFile; keep one`}},
		{"UPDATE without old", header + "cases:\n- name: a\n  operation: UPDATE\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: case "a": operation UPDATE needs oldObject or oldObjectFile`}},
		{"CREATE with old", header + "cases:\n- name: a\n  operation: CREATE\n" + obj + "  oldObjectFile: old.yaml\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: case "a": operation CREATE with an oldObject`}},
		{"DELETE", header + "cases:\n- name: a\n  operation: DELETE\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: case "a": operation must be CREATE or UPDATE, got "DELETE"`}},
		{"no allowed", header + "cases:\n- name: a\n" + obj + "  expect: {warnings: [x]}\n",
			[]string{`s-test.yaml:10: case "a": expect has no allowed; add allowed: true or allowed: false`}},
		{"violation without rule, bad action", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: false\n    violations:\n    - {field: spec.x, action: Reject}\n",
			[]string{`s-test.yaml:13: case "a": violation 1 has no rule`, `s-test.yaml:13: case "a": violation 1: action must be Deny, Warn, Audit or Exempt (a PolicyException of policies: exempts it), got "Reject"`}},
		{"object without kind", header + "cases:\n- name: a\n  object: {apiVersion: v1, metadata: {name: c}}\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: the object (apiVersion v1) has no kind; add it`}},
		{"bad field path", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    defaults: {spec..x: 1}\n",
			[]string{`s-test.yaml:12: defaults: field path "spec..x", at character 6: an empty key`}},
		{"malformed YAML", header + "cases:\n- name: a\n  object: {apiVersion: v1, kind: ConfigMap\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: invalid YAML: did not find expected ',' or '}'`}},
		{"two documents", header + "cases:\n- name: a\n" + obj + "  expect: {allowed: true}\n---\n" + header,
			[]string{`s-test.yaml:11: a second document: a suite file holds one suite`}},
		{"empty", "# nothing\n", []string{`s-test.yaml: empty; a suite has apiVersion`}},
		{"fieldValidation", header + "fieldValidation: Ignore\ncases:\n- name: a\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:3: fieldValidation must be Strict or Warn, got "Ignore"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { parseFails(t, tc.suite, tc.want) })
	}
}

func TestLoadResolvesFilesAgainstTheSuiteDirectory(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, dir, "suites/objects/tj.yaml", "# a TrainJob\n"+strings.ReplaceAll(trainJob, "    ", ""))
	testkit.WriteFile(t, dir, "suites/runtimes.yaml", "")
	s, err := Load(testkit.WriteFile(t, dir, "suites/a-test.yaml", header+"context: [runtimes.yaml]\ncases:\n- name: a\n  objectFile: objects/tj.yaml\n  expect: {allowed: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Context[0].Resolved, filepath.Join(dir, "suites", "runtimes.yaml"); got != want {
		t.Errorf("context resolved to %s, want %s", got, want)
	}
	if o := s.Cases[0].Object; o == nil || o.GetName() != "tj" || o.Line != 2 {
		t.Errorf("objectFile read as %+v", o)
	}
}

func TestLoadMissingFilesAreErrorsAtTheirLine(t *testing.T) {
	dir := t.TempDir()
	file := testkit.WriteFile(t, dir, "a-test.yaml", header+"policies: [policy.yaml]\ncases:\n- name: a\n  objectFile: tj.yaml\n  expect: {allowed: true}\n")
	_, err := Load(file)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{
		file + ":3: policies: policy.yaml: no such file or directory (paths are relative to the suite's directory, " + dir + ")",
		file + `:6: case "a": objectFile tj.yaml: no such file or directory`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}

func TestLoadObjectFileHoldsOneObject(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, dir, "two.yaml", strings.ReplaceAll(trainJob, "    ", "")+"---\n"+strings.ReplaceAll(trainJob, "    ", ""))
	testkit.WriteFile(t, dir, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [}\n")
	for file, want := range map[string]string{
		"two.yaml": "holds 2 objects; an objectFile holds exactly one",
		// The line is the YAML reader's (kubectl's and check's), which
		// names the line before an unclosed flow collection here.
		"bad.yaml": filepath.Join(dir, "bad.yaml") + ":2: invalid YAML: did not find expected node content",
	} {
		_, err := Load(testkit.WriteFile(t, dir, "a-test.yaml", header+"cases:\n- name: a\n  objectFile: "+file+"\n  expect: {allowed: true}\n"))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `a-test.yaml:5: case "a": objectFile: `) {
			t.Errorf("%s: error %v, want one at a-test.yaml:5 containing %q", file, err, want)
		}
	}
}

func TestParseFieldPath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want fieldPath
	}{
		{"spec.template.terminationDelay", fieldPath{"spec", "template", "terminationDelay"}},
		{"spec.cliques[0].spec.minAvailable", fieldPath{"spec", "cliques", 0, "spec", "minAvailable"}},
		{"metadata.annotations['shepherd.dev/max-restarts']", fieldPath{"metadata", "annotations", "shepherd.dev/max-restarts"}},
		{`metadata.labels["a.b"]`, fieldPath{"metadata", "labels", "a.b"}},
		{"spec.replicatedJobs[1][2]", fieldPath{"spec", "replicatedJobs", 1, 2}},
	} {
		got, err := parseFieldPath(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
	}
	for _, bad := range []string{"", "spec.", ".spec", "spec..x", "spec[x]", "spec[0", "spec['x]", "spec[0]x"} {
		if _, err := parseFieldPath(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	obj := map[string]any{"spec": map[string]any{"l": []any{map[string]any{"a": int64(1)}}}}
	if v, ok := (fieldPath{"spec", "l", 0, "a"}).lookup(obj); !ok || v != int64(1) {
		t.Errorf("lookup = %v, %v", v, ok)
	}
	for _, p := range []fieldPath{{"spec", "l", 1, "a"}, {"spec", "x"}, {"spec", "l", "a"}} {
		if _, ok := p.lookup(obj); ok {
			t.Errorf("lookup %v found a value", p)
		}
	}
}

func TestDiscoverFindsSuitesByName(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a/shepherd-test.yaml", "a/b/trainjob-test.yml", "a/policy.yaml", "a/testdata/x-test.yaml", "a/.hidden/y-test.yaml", "a/_skip/z-test.yaml"} {
		testkit.WriteFile(t, dir, f, "")
	}
	got, err := Discover([]string{filepath.Join(dir, "a"), filepath.Join(dir, "a/testdata/x-test.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a/b/trainjob-test.yml"), filepath.Join(dir, "a/shepherd-test.yaml"), filepath.Join(dir, "a/testdata/x-test.yaml")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("suites (-want +got):\n%s", diff)
	}
	// A testdata directory named on the command line is searched.
	if got, err := Discover([]string{filepath.Join(dir, "a/testdata")}); err != nil || len(got) != 1 {
		t.Errorf("Discover(testdata) = %v, %v", got, err)
	}
	if _, err := Discover([]string{filepath.Join(dir, "a/b/../.hidden/..", "_skip", "..", "..", "a", "policy.yaml")}); err != nil {
		t.Errorf("a file named explicitly is a suite whatever its name: %v", err)
	}
	testkit.WriteFile(t, dir, "empty/readme.md", "")
	if _, err := Discover([]string{filepath.Join(dir, "empty")}); err == nil || !strings.Contains(err.Error(), "no suite (a file named *-test.yaml)") {
		t.Errorf("a directory without suites: %v", err)
	}
	if _, err := Discover([]string{filepath.Join(dir, "nope")}); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("a missing path: %v", err)
	}
}

// parseFails checks that Parse refuses suite with an error containing each
// of want.
func parseFails(t *testing.T, suite string, want []string) {
	t.Helper()
	_, err := Parse("s-test.yaml", []byte(suite))
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}
