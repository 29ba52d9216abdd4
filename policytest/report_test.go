package policytest

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/webhook"
)

func sampleResults() []SuiteResult {
	tj := Subject{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "default", Name: "tj"}
	return []SuiteResult{
		{File: "a-test.yaml", Passed: 1, Failed: 2, Duration: 30 * time.Millisecond, Cases: []CaseResult{
			{Name: "good", Line: 5, Operation: "CREATE", Subject: tj, Passed: true, Mismatches: []Mismatch{}, Got: &Got{Allowed: true, Violations: []webhook.Violation{}, Warnings: []string{}}},
			{Name: "bad", Line: 12, Operation: "CREATE", Subject: tj, Mismatches: []Mismatch{
				{Kind: MismatchAllowed, Message: "expected allowed, got denied"},
				{Kind: MismatchDefaults, Message: "the object after defaulting differs at spec.x", Diff: "  map[string]any{\n- \t\"spec.x\": string(\"a\"),\n  }\n"},
			}, Got: &Got{Violations: []webhook.Violation{deadline}, Warnings: []string{}}},
			{Name: "slow", Line: 20, Operation: "UPDATE", Subject: tj, Mismatches: []Mismatch{}, Error: "admission did not finish within --timeout=1ns"},
		}},
		{File: "b-test.yaml", Passed: 1, Cases: []CaseResult{{Name: "fine", Line: 4, Operation: "CREATE", Subject: tj, Passed: true, Mismatches: []Mismatch{}}}},
	}
}

func TestWriteTextListsFailuresWithTheirPosition(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sampleResults(), false); err != nil {
		t.Fatal(err)
	}
	want := `FAIL a-test.yaml: 3 cases, 2 failed
    --- FAIL: bad (a-test.yaml:12) TrainJob default/tj CREATE
        expected allowed, got denied
        the object after defaulting differs at spec.x
        diff (-want +got):
              map[string]any{
            - 	"spec.x": string("a"),
              }
    --- FAIL: slow (a-test.yaml:20) TrainJob default/tj UPDATE
        error: admission did not finish within --timeout=1ns
ok   b-test.yaml: 1 case, all passed
FAIL: 2 suites, 4 cases, 2 failed
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := WriteText(&b, sampleResults(), true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "    --- PASS: good (a-test.yaml:5) TrainJob default/tj CREATE\n") {
		t.Errorf("verbose text does not list the passing case:\n%s", b.String())
	}
}

func TestWriteJSONShape(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, sampleResults()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Passed, Failed int
		Suites         []struct {
			File           string
			Passed, Failed int
			Cases          []struct {
				Name       string
				Line       int
				Operation  string
				Subject    map[string]string
				Passed     bool
				Error      string
				Mismatches []map[string]string
				Got        *struct {
					Allowed    bool
					Violations []map[string]any
					Warnings   []string
				}
			}
		}
	}
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.Passed != 2 || got.Failed != 2 || len(got.Suites) != 2 || len(got.Suites[0].Cases) != 3 {
		t.Fatalf("report = %+v", got)
	}
	bad := got.Suites[0].Cases[1]
	if bad.Name != "bad" || bad.Line != 12 || bad.Passed || bad.Subject["kind"] != "TrainJob" || len(bad.Mismatches) != 2 ||
		bad.Mismatches[0]["kind"] != MismatchAllowed || bad.Mismatches[1]["diff"] == "" || bad.Got == nil || bad.Got.Violations[0]["rule"] != "V-TJ-1" {
		t.Errorf("failed case = %+v", bad)
	}
	if slow := got.Suites[0].Cases[2]; slow.Error == "" || slow.Got != nil {
		t.Errorf("errored case = %+v", slow)
	}
}

func TestWriteJUnitShape(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJUnit(&b, sampleResults()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), xml.Header) {
		t.Errorf("no XML header:\n%s", b.String())
	}
	var got junitTestSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.Tests != 4 || got.Failures != 1 || got.Errors != 1 || len(got.Suites) != 2 {
		t.Fatalf("testsuites = %+v", got)
	}
	a := got.Suites[0]
	if a.Name != "a-test.yaml" || a.Tests != 3 || a.Failures != 1 || a.Errors != 1 || a.Time != "0.030" {
		t.Errorf("testsuite = %+v", a)
	}
	if c := a.Cases[0]; c.Name != "good" || c.Classname != "a-test.yaml" || c.Failure != nil || c.Error != nil {
		t.Errorf("passing testcase = %+v", c)
	}
	f := a.Cases[1].Failure
	if f == nil || f.Message != "expected allowed, got denied (and 1 more)" || f.Type != "mismatch" ||
		!strings.Contains(f.Text, "a-test.yaml:12: TrainJob default/tj CREATE\nexpected allowed, got denied\nthe object after defaulting differs at spec.x\ndiff (-want +got):") {
		t.Errorf("failure = %+v", f)
	}
	if e := a.Cases[2].Error; e == nil || e.Message != "admission did not finish within --timeout=1ns" || a.Cases[2].Failure != nil {
		t.Errorf("error = %+v", a.Cases[2])
	}
}
