package policytest

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestParseMoreErrors: the mistakes TestParseErrorsNameFileLineAndFix does
// not make, each at its line and saying what to write instead.
func TestParseMoreErrors(t *testing.T) {
	obj := "  object:\n" + trainJob // lines 5-9 of a first case at line 4; expect at 10
	for _, tc := range []struct {
		name, suite string
		want        []string
	}{
		{"a suite that is a list", "- apiVersion: shepherd.dev/v1alpha1\n",
			[]string{`s-test.yaml:1: a suite is a mapping (apiVersion: shepherd.dev/v1alpha1, kind: PolicyTest, cases: [...])`}},
		{"oldObject and oldObjectFile", header + "cases:\n- name: a\n" + obj + "  oldObject:\n" + trainJob + "  oldObjectFile: old.yaml\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:15: case "a": both oldObject and oldObjectFile; keep one`}},
		{"an empty warning", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    warnings: [deprecated, \"\"]\n",
			[]string{`s-test.yaml:12: case "a": warning 2 is empty; give a substring of the warning`}},
		{"expect.object not a mapping", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    object: [spec]\n",
			[]string{`s-test.yaml:12: case "a": expect.object must be a (partial) object, a mapping`}},
		{"a path that is a number", header + "policies: [1]\ncases:\n- name: a\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:3: want a file path (a non-empty string)`}},
		{"an empty path", header + "context: [\"\"]\ncases:\n- name: a\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:3: want a file path (a non-empty string)`}},
		{"defaults as a list", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    defaults: [spec.x]\n",
			[]string{`s-test.yaml:12: want a mapping of field path to value, e.g. {"spec.template.terminationDelay": 0s}`}},
		// Every bad path of one defaults mapping is reported, not the first.
		{"two bad default paths", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: true\n    defaults:\n      spec.: 1\n      \"spec[x]\": 2\n",
			[]string{`s-test.yaml:13: defaults: field path "spec.", at character 5: a trailing dot`,
				`s-test.yaml:14: defaults: field path "spec[x]", at character 5: an index is a number, a key is quoted`}},
		{"an object that is a list", header + "cases:\n- name: a\n  object: [ConfigMap]\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: want an object (a mapping with apiVersion, kind, metadata, ...)`}},
		{"an object of neither apiVersion nor kind", header + "cases:\n- name: a\n  object: {metadata: {name: c}}\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: the object has neither apiVersion nor kind; add both`}},
		{"an object without apiVersion", header + "cases:\n- name: a\n  object: {kind: TrainJob}\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: the object (kind TrainJob) has no apiVersion; add it`}},
		{"an old object without kind", header + "cases:\n- name: a\n" + obj + "  oldObject: {apiVersion: v1}\n  expect: {allowed: true}\n",
			[]string{`s-test.yaml:10: the object (apiVersion v1) has no kind; add it`}},
		{"unknown key in a violation", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: false\n    violations: [{rule: V-TJ-1, fild: spec.x}]\n",
			[]string{`s-test.yaml:12: unknown key "fild" in a violation; its keys are: rule, field, message, action`}},
		{"covers as a string", header + "cases:\n- name: a\n  covers: V-TJ-1\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:5: want a list of strings, got a string (V-TJ-1)`}},
		{"violations as a mapping", header + "cases:\n- name: a\n" + obj + "  expect:\n    allowed: false\n    violations: {rule: V-TJ-1}\n",
			[]string{`s-test.yaml:12: want a list of violations ({rule: ID, field: PATH}), got a mapping`}},
		{"cases as a mapping", header + "cases: {name: a}\n",
			[]string{`s-test.yaml:3: want a list of cases, got a mapping`}},
		// A case without a name is named by its position in later errors.
		{"errors of an unnamed case", header + "cases:\n- name: a\n" + obj + "  expect: {allowed: true}\n- operation: PATCH\n" + obj + "  expect: {allowed: true}\n",
			[]string{`s-test.yaml:11: case 2: no name`, `s-test.yaml:11: case 2: operation must be CREATE or UPDATE, got "PATCH"`}},
	} {
		t.Run(tc.name, func(t *testing.T) { parseFails(t, tc.suite, tc.want) })
	}
}

// Parse reads values as kubectl reads a manifest: whole numbers int64,
// others float64, YAML 1.1's yes a boolean, in inline objects as in
// expectations.
func TestParseReadsValuesAsKubectl(t *testing.T) {
	s, err := Parse("s-test.yaml", []byte(header+`cases:
- name: a
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, spec: {count: 3, f: 1.5, enabled: yes, list: [1, x]}}
  expect:
    allowed: true
    defaults: {spec.count: 3, spec.f: 1.5}
    object: {spec: {count: 3, list: [1, x], none: null}}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Cases[0]
	wantSpec := map[string]any{"count": int64(3), "f": 1.5, "enabled": true, "list": []any{int64(1), "x"}}
	if diff := cmp.Diff(wantSpec, c.Object.Object["spec"]); diff != "" {
		t.Errorf("object spec (-want +got):\n%s", diff)
	}
	if c.Expect.Defaults[0].Value != int64(3) || c.Expect.Defaults[1].Value != 1.5 {
		t.Errorf("defaults = %#v", c.Expect.Defaults)
	}
	wantObject := map[string]any{"spec": map[string]any{"count": int64(3), "list": []any{int64(1), "x"}, "none": nil}}
	if diff := cmp.Diff(wantObject, c.Expect.Object.V); diff != "" {
		t.Errorf("expect.object (-want +got):\n%s", diff)
	}
	if c.Object.File != "s-test.yaml" || c.Object.Line != 5 || c.Expect.Object.Line != 9 {
		t.Errorf("positions: object %s:%d, expect.object line %d", c.Object.File, c.Object.Line, c.Expect.Object.Line)
	}
	if v, ok := c.Expect.Defaults[0].Lookup(c.Object.Object); !ok || v != int64(3) {
		t.Errorf("Default.Lookup = %v, %v; want 3", v, ok)
	}
	if _, ok := c.Expect.Defaults[0].Lookup(nil); ok {
		t.Error("Default.Lookup of no object found a value")
	}
}

// A suite as JSON (the report's input echo): paths as written, defaults as
// an object, values and objects as themselves.
func TestSuiteJSON(t *testing.T) {
	s, err := Parse("s-test.yaml", []byte(header+`policies: [p.yaml]
cases:
- name: a
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}
  expect:
    allowed: true
    defaults: {spec.x: 1, "metadata.labels['a.b']": null}
    object: {spec: {a: z}}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "shepherd.dev/v1alpha1", "kind": "PolicyTest", "file": "s-test.yaml",
		"policies": []any{"p.yaml"},
		"cases": []any{map[string]any{
			"name": "a", "operation": "CREATE", "line": float64(5),
			"object": map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}},
			"expect": map[string]any{
				"allowed":  true,
				"defaults": map[string]any{"spec.x": float64(1), "metadata.labels['a.b']": nil},
				"object":   map[string]any{"spec": map[string]any{"a": "z"}},
			},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
}

func TestErrorNamesFileAndLine(t *testing.T) {
	if got := (&Error{File: "a-test.yaml", Line: 3, Msg: "bad"}).Error(); got != "a-test.yaml:3: bad" {
		t.Errorf("with a line: %q", got)
	}
	if got := (&Error{File: "a-test.yaml", Msg: "bad"}).Error(); got != "a-test.yaml: bad" {
		t.Errorf("without a line: %q", got)
	}
	s := &Suite{File: "dir/a-test.yaml"}
	if s.DisplayName() != "dir/a-test.yaml" {
		t.Errorf("DisplayName of an unnamed suite = %q, want its file", s.DisplayName())
	}
}

// Load reads the old object from its file (the case becomes an UPDATE),
// resolves crds and keeps absolute paths, and reports what it cannot read.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	tj := strings.ReplaceAll(trainJob, "    ", "")
	testkit.WriteFile(t, dir, "old.yaml", "---\n# the stored job\n"+tj)
	testkit.WriteFile(t, dir, "crds/tj.yaml", "")
	abs := testkit.WriteFile(t, dir, "elsewhere/policy.yaml", "")
	s, err := Load(testkit.WriteFile(t, dir, "a-test.yaml", header+"policies: ["+abs+"]\ncrds: [crds]\ncases:\n- name: a\n  object:\n"+trainJob+"  oldObjectFile: old.yaml\n  expect: {allowed: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Policies[0].Resolved != abs {
		t.Errorf("an absolute policy path resolved to %s, want it as given", s.Policies[0].Resolved)
	}
	if got, want := s.CRDs[0].Resolved, filepath.Join(dir, "crds"); got != want {
		t.Errorf("crds resolved to %s, want %s", got, want)
	}
	c := s.Cases[0]
	if c.Operation != "UPDATE" || c.OldObject == nil || c.OldObject.GetName() != "tj" || c.OldObject.Line != 3 || c.OldObject.File != filepath.Join(dir, "old.yaml") {
		t.Errorf("case = operation %s, old object %+v", c.Operation, c.OldObject)
	}

	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"an objectFile of comments only", "empty.yaml", "# nothing\n---\n", "holds 0 objects; an objectFile holds exactly one"},
		{"an objectFile whose object has no kind", "nokind.yaml", "# a\napiVersion: v1\nmetadata: {name: c}\n", filepath.Join(dir, "nokind.yaml") + ":2: the object (apiVersion v1) has no kind; add it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.WriteFile(t, dir, tc.file, tc.content)
			_, err := Load(testkit.WriteFile(t, dir, "b-test.yaml", header+"cases:\n- name: b\n  objectFile: "+tc.file+"\n  expect: {allowed: true}\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `b-test.yaml:5: case "b": objectFile: `) {
				t.Errorf("error %v, want one at b-test.yaml:5 containing %q", err, tc.want)
			}
		})
	}

	missing := filepath.Join(dir, "nope-test.yaml")
	if _, err := Load(missing); err == nil || !strings.HasPrefix(err.Error(), missing+": cannot read the suite: ") {
		t.Errorf("a missing suite: %v", err)
	}
	// Every missing file of a suite is reported at once.
	_, err = Load(testkit.WriteFile(t, dir, "c-test.yaml", header+"context: [a.yaml, b.yaml]\ncrds: [c]\ncases:\n- name: c\n  object:\n"+trainJob+"  expect: {allowed: true}\n"))
	for _, w := range []string{"c-test.yaml:3: context: a.yaml: no such file", "c-test.yaml:3: context: b.yaml: no such file", "c-test.yaml:4: crds: c: no such file"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v, want it to contain %q", err, w)
		}
	}
}
