package policytest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/webhook"
)

func kinds(ms []Mismatch) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Kind)
	}
	return out
}

func expectFrom(t *testing.T, yaml string) *Expect {
	t.Helper()
	s, err := Parse("e-test.yaml", []byte(header+"cases:\n- name: a\n  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n  expect:\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	return &s.Cases[0].Expect
}

var deadline = webhook.Violation{Rule: "V-TJ-1", Field: "spec.activeDeadlineSeconds", Message: "activeDeadlineSeconds must be at least 1, got 0", Action: webhook.ActionDeny}

func TestCompareEachMismatchKind(t *testing.T) {
	ttl := webhook.Violation{Rule: "V-TR-2", Field: "spec.ttl", Message: "very quickly", Action: webhook.ActionWarn}
	obj := map[string]any{"spec": map[string]any{
		"startupPolicy": nil,
		"jobs":          []any{map[string]any{"name": "a"}, map[string]any{"name": "b", "dependsOn": []any{map[string]any{"name": "a", "status": "Ready"}}}},
		"delay":         "0s",
	}}
	for _, tc := range []struct {
		name   string
		expect string
		got    webhook.Verdict
		want   []string // kinds
		msgs   []string // substrings of the messages, in order
	}{
		{"all as expected", "    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, message: at least 1, action: Deny}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{}, nil},
		{"verdict", "    allowed: true\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{MismatchAllowed}, []string{"expected allowed, got denied"}},
		{"verdict the other way", "    allowed: false\n",
			webhook.Verdict{Allowed: true}, []string{MismatchAllowed}, []string{"expected denied, got allowed"}},
		{"missing violation", "    allowed: true\n    violations: [{rule: V-TJ-1}]\n",
			webhook.Verdict{Allowed: true}, []string{MismatchMissingViolation}, []string{"missing violation V-TJ-1 at (object)"}},
		{"violation at another field", "    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.x}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{MismatchMissingViolation, MismatchUnexpectedViolation},
			[]string{"missing violation V-TJ-1 at spec.x", "unexpected violation V-TJ-1 at spec.activeDeadlineSeconds (Deny): activeDeadlineSeconds must be at least 1"}},
		{"message does not match: reported once", "    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, message: at most}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{MismatchMissingViolation},
			[]string{`missing violation V-TJ-1 at spec.activeDeadlineSeconds with a message containing "at most"; got V-TJ-1 at spec.activeDeadlineSeconds (Deny): activeDeadlineSeconds must be at least 1, got 0`}},
		{"action does not match", "    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds, action: Warn}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{MismatchMissingViolation}, []string{"V-TJ-1 at spec.activeDeadlineSeconds (Warn); got V-TJ-1"}},
		{"the same violation twice needs two expectations", "    allowed: false\n    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds}]\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline, deadline}}, []string{MismatchUnexpectedViolation}, []string{"unexpected violation V-TJ-1"}},
		{"unexpected violation", "    allowed: false\n",
			webhook.Verdict{Violations: []webhook.Violation{deadline}}, []string{MismatchUnexpectedViolation}, []string{"unexpected violation V-TJ-1"}},
		{"missing warning", "    allowed: true\n    warnings: [deprecated]\n",
			webhook.Verdict{Allowed: true, Warnings: []string{"something else"}}, []string{MismatchMissingWarning, MismatchUnexpectedWarning},
			[]string{`missing warning containing "deprecated"; got ["something else"]`, `unexpected warning "something else"`}},
		{"a warning of a Warn violation needs no expectation", "    allowed: true\n    violations: [{rule: V-TR-2, field: spec.ttl}]\n",
			webhook.Verdict{Allowed: true, Violations: []webhook.Violation{ttl}, Warnings: []string{"spec.ttl: very quickly"}}, []string{}, nil},
		{"each expected warning matches its own warning", "    allowed: true\n    warnings: [deprecated, deprecated]\n",
			webhook.Verdict{Allowed: true, Warnings: []string{"x is deprecated"}}, []string{MismatchMissingWarning}, []string{`missing warning containing "deprecated"`}},
		{"defaults as expected", "    allowed: true\n    defaults: {spec.delay: 0s, spec.startupPolicy: null, spec.absent: null, \"spec.jobs[1].dependsOn[0].status\": Ready}\n",
			webhook.Verdict{Allowed: true, Object: obj}, []string{}, nil},
		{"defaults wrong", "    allowed: true\n    defaults: {spec.delay: 4h, spec.jobs: null, spec.absent: 1}\n",
			webhook.Verdict{Allowed: true, Object: obj}, []string{MismatchDefaults}, []string{"the object after defaulting differs at spec.delay, spec.jobs, spec.absent"}},
		{"object contained", "    allowed: true\n    object: {spec: {delay: 0s, absent: null, jobs: [{name: a}, {dependsOn: [{name: a}]}]}}\n",
			webhook.Verdict{Allowed: true, Object: obj}, []string{}, nil},
		{"object not contained", "    allowed: true\n    object: {spec: {jobs: [{name: a}]}}\n",
			webhook.Verdict{Allowed: true, Object: obj}, []string{MismatchObject}, []string{"the object after defaulting does not contain expect.object"}},
	} {
		t.Run(tc.name, func(t *testing.T) { compares(t, tc.expect, &tc.got, tc.want, tc.msgs) })
	}
}

func TestCompareDefaultsDiffShowsEachExpectedPath(t *testing.T) {
	e := expectFrom(t, "    allowed: true\n    defaults: {spec.delay: 4h, spec.kept: 1, spec.gone: x, spec.extra: null}\n")
	got := Compare(e, &webhook.Verdict{Allowed: true, Object: map[string]any{"spec": map[string]any{"delay": "0s", "kept": int64(1), "extra": true}}})
	if len(got) != 1 {
		t.Fatalf("mismatches = %+v", got)
	}
	for _, line := range []string{
		`- 	"spec.delay": string("4h"),`,
		`+ 	"spec.delay": string("0s"),`,
		`+ 	"spec.extra": bool(true),`,
		`- 	"spec.gone":  string("x"),`,
	} {
		if !strings.Contains(got[0].Diff, line) {
			t.Errorf("diff lacks %q:\n%s", line, got[0].Diff)
		}
	}
	if strings.Contains(got[0].Diff, "\u00a0") {
		t.Errorf("diff has non-breaking spaces:\n%q", got[0].Diff)
	}
}

func TestRunAdmitsCopiesAndReportsErrors(t *testing.T) {
	s, err := Parse("r-test.yaml", []byte(header+`cases:
- name: ok
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: ns}}
  expect: {allowed: true}
- name: slow
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: slow}}
  expect: {allowed: true}
- name: update
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}
  oldObject: {apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {a: b}}
  expect: {allowed: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	admit := func(_ context.Context, op string, obj, old *unstructured.Unstructured) (*webhook.Verdict, error) {
		ops = append(ops, op)
		if obj.GetName() == "slow" {
			return nil, errors.New("admission did not finish within --timeout=10s")
		}
		obj.SetLabels(map[string]string{"changed": "by admit"})
		return &webhook.Verdict{Allowed: old == nil}, nil
	}
	r := Run(context.Background(), s, admit)
	if diff := cmp.Diff([]string{"CREATE", "CREATE", "UPDATE"}, ops); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}
	if r.Passed != 2 || r.Failed != 1 || !r.Cases[0].Passed || r.Cases[1].Passed || !r.Cases[2].Passed {
		t.Errorf("result = %+v", r)
	}
	if r.Cases[1].Error != "admission did not finish within --timeout=10s" || len(r.Cases[1].Mismatches) != 0 {
		t.Errorf("slow case = %+v", r.Cases[1])
	}
	if s.Cases[0].Object.GetLabels() != nil {
		t.Errorf("admit changed the suite's object: %v", s.Cases[0].Object.GetLabels())
	}
	if got := r.Cases[0].Subject; got != (Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "c"}) || got.String() != "ConfigMap ns/c" {
		t.Errorf("subject = %+v", got)
	}
}

// compares checks the mismatches Compare finds between the expectation
// written as expect and got: their kinds want, in order, and messages
// containing msgs.
func compares(t *testing.T, expect string, got *webhook.Verdict, want, msgs []string) {
	t.Helper()
	ms := Compare(expectFrom(t, expect), got)
	if diff := cmp.Diff(want, kinds(ms)); diff != "" {
		t.Fatalf("mismatch kinds (-want +got):\n%s\n%+v", diff, ms)
	}
	for i, m := range msgs {
		if !strings.Contains(ms[i].Message, m) {
			t.Errorf("mismatch %d = %q, want it to contain %q", i, ms[i].Message, m)
		}
	}
}
