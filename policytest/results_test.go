package policytest

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/webhook"
)

func TestSelect(t *testing.T) {
	suite := func() *Suite {
		return &Suite{Name: "deadlines", Cases: []Case{{Name: "zero"}, {Name: "negative"}, {Name: "unset"}}}
	}
	names := func(s *Suite) []string {
		var out []string
		for _, c := range s.Cases {
			out = append(out, c.Name)
		}
		return out
	}
	for _, tc := range []struct {
		re   string
		want []string
	}{
		{"", []string{"zero", "negative", "unset"}},
		{"^(zero|unset)$", []string{"zero", "unset"}},
		{"^deadlines/neg", []string{"negative"}},
		{"^other/", nil},
	} {
		s := suite()
		var re *regexp.Regexp
		if tc.re != "" {
			re = regexp.MustCompile(tc.re)
		}
		if n := Select(s, re); n != len(tc.want) {
			t.Errorf("Select(%q) = %d, want %d", tc.re, n, len(tc.want))
		}
		if diff := cmp.Diff(tc.want, names(s)); diff != "" {
			t.Errorf("Select(%q) kept (-want +got):\n%s", tc.re, diff)
		}
	}
	// An unnamed suite is selected by its file.
	s := &Suite{File: "a/b-test.yaml", Cases: []Case{{Name: "x"}, {Name: "y"}}}
	if n := Select(s, regexp.MustCompile(`^a/b-test\.yaml/y$`)); n != 1 || s.Cases[0].Name != "y" {
		t.Errorf("selecting by file kept %+v", s.Cases)
	}
}

// TestCompareEdges: the corners TestCompareEachMismatchKind leaves: exempt
// violations and their warnings, warnings of a field-less Warn violation,
// no warnings at all, and partial objects that differ in shape.
func TestCompareEdges(t *testing.T) {
	exempt := webhook.ExemptViolation{Violation: webhook.Violation{Rule: "V-TJ-1", Field: "spec.activeDeadlineSeconds", Message: "too short", Action: webhook.ActionDeny}}
	whole := webhook.Violation{Rule: "team-label", Message: "needs a team label", Action: webhook.ActionWarn}
	obj := map[string]any{"spec": map[string]any{"jobs": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}, "delay": "0s"}}
	for _, tc := range []struct {
		name   string
		expect string
		got    webhook.Verdict
		want   []string // kinds
		msgs   []string // substrings of the messages, in order
	}{
		{"an exempt violation is expected with action Exempt, its warning with it",
			"    allowed: true\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, action: Exempt}]\n",
			webhook.Verdict{Allowed: true, Exempted: []webhook.ExemptViolation{exempt},
				Warnings: []string{webhook.ExemptWarningPrefix + "short-jobs (until 2027-01-01T00:00:00Z): spec.activeDeadlineSeconds: too short"}},
			[]string{}, nil},
		{"an exempt violation expected as a Deny",
			"    allowed: true\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, action: Deny}]\n",
			webhook.Verdict{Allowed: true, Exempted: []webhook.ExemptViolation{exempt}},
			[]string{MismatchMissingViolation}, []string{"missing violation V-TJ-1 at spec.activeDeadlineSeconds (Deny); got V-TJ-1 at spec.activeDeadlineSeconds (Exempt): too short"}},
		{"an exempt warning of another message is unexpected",
			"    allowed: true\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, action: Exempt}]\n",
			webhook.Verdict{Allowed: true, Exempted: []webhook.ExemptViolation{exempt},
				Warnings: []string{webhook.ExemptWarningPrefix + "short-jobs (until 2027-01-01T00:00:00Z): spec.x: other"}},
			[]string{MismatchUnexpectedWarning}, []string{`unexpected warning "exempt by PolicyException short-jobs`}},
		{"the warning of a Warn violation of the whole object",
			"    allowed: true\n    violations: [{rule: team-label}]\n",
			webhook.Verdict{Allowed: true, Violations: []webhook.Violation{whole}, Warnings: []string{"needs a team label"}},
			[]string{}, nil},
		// Only a Warn violation's warning is accounted for: a Deny's text
		// in a warning is a warning of its own.
		{"a warning that reads like a Deny violation",
			"    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}, Warnings: []string{"spec.activeDeadlineSeconds: " + deadline.Message}},
			[]string{MismatchUnexpectedWarning}, nil},
		{"a missing warning when there are none",
			"    allowed: true\n    warnings: [deprecated]\n",
			webhook.Verdict{Allowed: true},
			[]string{MismatchMissingWarning}, []string{`missing warning containing "deprecated"; got no warnings`}},
		{"a list longer than expected",
			"    allowed: true\n    object: {spec: {jobs: [{name: a}]}}\n",
			webhook.Verdict{Allowed: true, Object: obj},
			[]string{MismatchObject}, nil},
		{"a list where a string is",
			"    allowed: true\n    object: {spec: {delay: [0s]}}\n",
			webhook.Verdict{Allowed: true, Object: obj},
			[]string{MismatchObject}, nil},
		{"an empty mapping where a string is",
			"    allowed: true\n    object: {spec: {delay: {}}}\n",
			webhook.Verdict{Allowed: true, Object: obj},
			[]string{MismatchObject}, nil},
		{"a mapping where a list is",
			"    allowed: true\n    object: {spec: {jobs: {name: a}}}\n",
			webhook.Verdict{Allowed: true, Object: obj},
			[]string{MismatchObject}, nil},
		{"a field expected absent is there",
			"    allowed: true\n    object: {spec: {delay: null}}\n",
			webhook.Verdict{Allowed: true, Object: obj},
			[]string{MismatchObject}, nil},
		{"no object (a DELETE's), a partial object expected",
			"    allowed: true\n    object: {spec: {delay: 0s}}\n",
			webhook.Verdict{Allowed: true},
			[]string{MismatchObject}, nil},
		{"no object, every default expected absent",
			"    allowed: true\n    defaults: {spec.delay: null}\n",
			webhook.Verdict{Allowed: true},
			[]string{}, nil},
		{"no object, a default expected",
			"    allowed: true\n    defaults: {spec.delay: 0s}\n",
			webhook.Verdict{Allowed: true},
			[]string{MismatchDefaults}, []string{"the object after defaulting differs at spec.delay"}},
		{"every mismatch at once, in order",
			"    allowed: true\n    violations: [{rule: V-X}]\n    warnings: [w]\n    defaults: {spec.delay: 1s}\n    object: {spec: {delay: 1s}}\n",
			webhook.Verdict{Object: obj, Violations: []webhook.Violation{deadline}},
			[]string{MismatchAllowed, MismatchMissingViolation, MismatchUnexpectedViolation, MismatchMissingWarning, MismatchDefaults, MismatchObject}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { compares(t, tc.expect, &tc.got, tc.want, tc.msgs) })
	}
}

// The object diff shows what differs at the expected fields only.
func TestCompareObjectDiff(t *testing.T) {
	e := expectFrom(t, "    allowed: true\n    object: {spec: {delay: 1s}}\n")
	got := Compare(e, &webhook.Verdict{Allowed: true, Object: map[string]any{"spec": map[string]any{"delay": "0s", "other": "x"}}})
	if len(got) != 1 {
		t.Fatalf("mismatches = %+v", got)
	}
	for _, line := range []string{`-`, `"delay": string("1s")`, `+`, `"delay": string("0s")`} {
		if !strings.Contains(got[0].Diff, line) {
			t.Errorf("diff lacks %q:\n%s", line, got[0].Diff)
		}
	}
	if strings.Contains(got[0].Diff, "other") {
		t.Errorf("diff shows a field expect.object does not name:\n%s", got[0].Diff)
	}
	// Elements beyond the expected list's length are shown: they are why
	// the lists differ.
	e = expectFrom(t, "    allowed: true\n    object: {spec: {jobs: [{name: a}]}}\n")
	got = Compare(e, &webhook.Verdict{Allowed: true, Object: map[string]any{"spec": map[string]any{"jobs": []any{
		map[string]any{"name": "a", "image": "x"}, map[string]any{"name": "b"}}}}})
	if len(got) != 1 || !strings.Contains(got[0].Diff, `"name": string("b")`) || strings.Contains(got[0].Diff, "image") {
		t.Errorf("a list longer than expected: %+v", got)
	}
}

// Run records what the chain answered: the verdict, every violation (the
// exempt ones as Exempt) and the warnings, beside the case's covers.
func TestRunRecordsWhatTheChainAnswered(t *testing.T) {
	s, err := Parse("r-test.yaml", []byte(header+`name: exempt
cases:
- name: a
  covers: [V-TJ-1]
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}
  expect: {allowed: true, violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, action: Exempt}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	exempt := webhook.ExemptViolation{Violation: deadline}
	admit := func(context.Context, string, *unstructured.Unstructured, *unstructured.Unstructured) (*webhook.Verdict, error) {
		return &webhook.Verdict{Allowed: true, Exempted: []webhook.ExemptViolation{exempt}}, nil
	}
	r := Run(context.Background(), s, admit)
	if r.Name != "exempt" || r.File != "r-test.yaml" || r.Passed != 1 || r.Failed != 0 {
		t.Fatalf("result = %+v", r)
	}
	c := r.Cases[0]
	wantExempt := deadline
	wantExempt.Action = webhook.ActionExempt
	want := &Got{Allowed: true, Violations: []webhook.Violation{wantExempt}, Warnings: []string{}}
	if diff := cmp.Diff(want, c.Got); diff != "" {
		t.Errorf("got (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"V-TJ-1"}, c.Covers); diff != "" || c.Line != 5 || c.Operation != "CREATE" || !c.Passed {
		t.Errorf("case = %+v", c)
	}
	if p, f := Summary([]SuiteResult{r, {Passed: 2, Failed: 5}}); p != 3 || f != 5 {
		t.Errorf("Summary = %d passed, %d failed; want 3, 5", p, f)
	}
}

func TestWriteTextOneSuiteAllPassed(t *testing.T) {
	var b bytes.Buffer
	results := []SuiteResult{{File: "a-test.yaml", Passed: 2, Cases: []CaseResult{{Name: "x", Passed: true}, {Name: "y", Passed: true}}}}
	if err := WriteText(&b, results, false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("ok   a-test.yaml: 2 cases, all passed\nPASS: 1 suite, 2 cases, all passed\n", b.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := WriteText(&b, nil, false); err != nil {
		t.Fatal(err)
	}
	if b.String() != "PASS: 0 suites, 0 cases, all passed\n" {
		t.Errorf("no suites: %q", b.String())
	}
}

func TestWriteJSONOfNoSuites(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("{\n  \"passed\": 0,\n  \"failed\": 0,\n  \"suites\": []\n}\n", b.String()); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
}

// One mismatch is the failure's message as it is; its diff is in the text,
// indented.
func TestWriteJUnitOneMismatch(t *testing.T) {
	results := []SuiteResult{{File: "a-test.yaml", Failed: 1, Cases: []CaseResult{{Name: "bad", Line: 7, Operation: "CREATE",
		Subject:    Subject{Kind: "TrainJob", Name: "tj"},
		Mismatches: []Mismatch{{Kind: MismatchObject, Message: "the object after defaulting does not contain expect.object", Diff: "- a\n+ b\n"}}}}}}
	var b bytes.Buffer
	if err := WriteJUnit(&b, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<failure message="the object after defaulting does not contain expect.object" type="mismatch">`,
		"<![CDATA[a-test.yaml:7: TrainJob tj CREATE\nthe object after defaulting does not contain expect.object\ndiff (-want +got):\n  - a\n  + b]]>",
		`<testsuites name="shepherd test" tests="1" failures="1" errors="0" time="0.000">`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JUnit lacks %q:\n%s", want, b.String())
		}
	}
}

// failingWriter fails every write after the first ok ones, as a pipe
// closed by its reader does.
type failingWriter struct{ ok int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.ok == 0 {
		return 0, errors.New("broken pipe")
	}
	w.ok--
	return len(b), nil
}

func TestWritersReportWriteErrors(t *testing.T) {
	for name, write := range map[string]func() error{
		"text":  func() error { return WriteText(&failingWriter{}, sampleResults(), false) },
		"json":  func() error { return WriteJSON(&failingWriter{}, sampleResults()) },
		"junit": func() error { return WriteJUnit(&failingWriter{}, sampleResults()) },
		// The XML header is written; the document is not.
		"junit after its header": func() error { return WriteJUnit(&failingWriter{ok: 1}, sampleResults()) },
	} {
		if err := write(); err == nil || !strings.Contains(err.Error(), "broken pipe") {
			t.Errorf("%s: %v, want the write's error", name, err)
		}
	}
}
