package policytest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// AdmitFunc admits one object through the chain of a suite: op is CREATE
// or UPDATE, old the stored object of an UPDATE (else nil). It may change
// obj and old (it gets copies). An error is an admission that produced no
// verdict (it outran its time limit).
type AdmitFunc func(ctx context.Context, op string, obj, old *unstructured.Unstructured) (*webhook.Verdict, error)

// Mismatch kinds: each way a result can differ from its expectation.
const (
	MismatchAllowed             = "allowed"
	MismatchMissingViolation    = "missing-violation"
	MismatchUnexpectedViolation = "unexpected-violation"
	MismatchMissingWarning      = "missing-warning"
	MismatchUnexpectedWarning   = "unexpected-warning"
	MismatchDefaults            = "defaults"
	MismatchObject              = "object"
)

// Mismatch is one difference between a case's expectation and its result.
type Mismatch struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Diff, for defaults and object, is the go-cmp diff (-want +got) of
	// the object after defaulting at the expected paths.
	Diff string `json:"diff,omitempty"`
}

// Subject names the object of a case.
type Subject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (s Subject) String() string {
	if s.Namespace == "" {
		return s.Kind + " " + s.Name
	}
	return s.Kind + " " + s.Namespace + "/" + s.Name
}

// Got is what the chain answered for a case.
type Got struct {
	Allowed    bool                `json:"allowed"`
	Violations []webhook.Violation `json:"violations"`
	Warnings   []string            `json:"warnings"`
}

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name      string   `json:"name"`
	Line      int      `json:"line"`
	Covers    []string `json:"covers,omitempty"`
	Operation string   `json:"operation"`
	Subject   Subject  `json:"subject"`
	Passed    bool     `json:"passed"`
	// Mismatches are every difference from the expectation (none when
	// Passed).
	Mismatches []Mismatch `json:"mismatches"`
	// Error is an admission that gave no verdict (the case fails).
	Error    string        `json:"error,omitempty"`
	Got      *Got          `json:"got,omitempty"`
	Duration time.Duration `json:"-"`
}

// SuiteResult is the outcome of one suite.
type SuiteResult struct {
	File     string        `json:"file"`
	Name     string        `json:"name,omitempty"`
	Passed   int           `json:"passed"`
	Failed   int           `json:"failed"`
	Cases    []CaseResult  `json:"cases"`
	Duration time.Duration `json:"-"`
}

// Select keeps the cases of s whose name, or "SUITE/NAME" (SUITE being
// DisplayName), match re, and reports how many it kept. A nil re keeps
// them all.
func Select(s *Suite, re *regexp.Regexp) int {
	if re == nil {
		return len(s.Cases)
	}
	kept := s.Cases[:0]
	for _, c := range s.Cases {
		if re.MatchString(c.Name) || re.MatchString(s.DisplayName()+"/"+c.Name) {
			kept = append(kept, c)
		}
	}
	s.Cases = kept
	return len(kept)
}

// Run admits every case of s with admit and compares each result with its
// expectation.
func Run(ctx context.Context, s *Suite, admit AdmitFunc) SuiteResult {
	start := time.Now()
	r := SuiteResult{File: s.File, Name: s.Name, Cases: make([]CaseResult, 0, len(s.Cases))}
	for i := range s.Cases {
		cr := runCase(ctx, &s.Cases[i], admit)
		if cr.Passed {
			r.Passed++
		} else {
			r.Failed++
		}
		r.Cases = append(r.Cases, cr)
	}
	r.Duration = time.Since(start)
	return r
}

func runCase(ctx context.Context, c *Case, admit AdmitFunc) CaseResult {
	start := time.Now()
	obj := c.Object.DeepCopy()
	var old *unstructured.Unstructured
	if c.OldObject != nil {
		old = c.OldObject.DeepCopy()
	}
	cr := CaseResult{
		Name:       c.Name,
		Line:       c.Line,
		Covers:     c.Covers,
		Operation:  c.Operation,
		Subject:    Subject{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Mismatches: []Mismatch{},
	}
	v, err := admit(ctx, c.Operation, obj, old)
	cr.Duration = time.Since(start)
	if err != nil {
		cr.Error = err.Error()
		return cr
	}
	cr.Got = &Got{Allowed: v.Allowed, Violations: v.WithExempted(), Warnings: append([]string{}, v.Warnings...)}
	cr.Mismatches = Compare(&c.Expect, v)
	cr.Passed = len(cr.Mismatches) == 0
	return cr
}

// Compare lists every difference between e and the verdict v.
func Compare(e *Expect, v *webhook.Verdict) []Mismatch {
	out := []Mismatch{}
	if e.Allowed != nil && *e.Allowed != v.Allowed {
		out = append(out, Mismatch{Kind: MismatchAllowed, Message: fmt.Sprintf("expected %s, got %s", verdict(*e.Allowed), verdict(v.Allowed))})
	}
	// An exempt violation is expected as one of action Exempt.
	all := v.WithExempted()
	out = append(out, compareViolations(e.Violations, all)...)
	out = append(out, compareWarnings(e.Warnings, v.Warnings, all)...)
	if m := compareDefaults(e.Defaults, v.Object); m != nil {
		out = append(out, *m)
	}
	if e.Object != nil {
		if m := compareObject(e.Object.V, v.Object); m != nil {
			out = append(out, *m)
		}
	}
	return out
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

func describe(v webhook.Violation) string {
	field := v.Field
	if field == "" {
		field = "(object)"
	}
	return fmt.Sprintf("%s at %s (%s): %s", v.Rule, field, v.Action, v.Message)
}

func describeExpected(e ExpectedViolation) string {
	field := e.Field
	if field == "" {
		field = "(object)"
	}
	s := e.Rule + " at " + field
	if e.Action != "" {
		s += " (" + e.Action + ")"
	}
	if e.Message != "" {
		s += fmt.Sprintf(" with a message containing %q", e.Message)
	}
	return s
}

// compareViolations matches the expected violations to the actual ones:
// each expected one to a distinct actual one of the same rule and field
// (and action and message, when given). An expected violation whose rule
// and field match but whose message or action does not is reported once,
// with what came instead.
func compareViolations(want []ExpectedViolation, got []webhook.Violation) []Mismatch {
	var out []Mismatch
	used := make([]bool, len(got))
	full := func(e ExpectedViolation, g webhook.Violation) bool {
		return e.Rule == g.Rule && e.Field == g.Field &&
			(e.Action == "" || e.Action == string(g.Action)) &&
			(e.Message == "" || strings.Contains(g.Message, e.Message))
	}
	var unmatched []ExpectedViolation
	for _, e := range want {
		found := false
		for i, g := range got {
			if !used[i] && full(e, g) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			unmatched = append(unmatched, e)
		}
	}
	for _, e := range unmatched {
		msg := "missing violation " + describeExpected(e)
		for i, g := range got {
			if !used[i] && g.Rule == e.Rule && g.Field == e.Field {
				used[i] = true
				msg += "; got " + describe(g)
				break
			}
		}
		out = append(out, Mismatch{Kind: MismatchMissingViolation, Message: msg})
	}
	for i, g := range got {
		if !used[i] {
			out = append(out, Mismatch{Kind: MismatchUnexpectedViolation, Message: "unexpected violation " + describe(g)})
		}
	}
	return out
}

// compareWarnings matches each expected substring to a distinct warning.
// Warnings left over are unexpected unless they render a Warn violation,
// which the violations already account for.
func compareWarnings(want, got []string, violations []webhook.Violation) []Mismatch {
	var out []Mismatch
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if !used[i] && strings.Contains(g, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			msg := fmt.Sprintf("missing warning containing %q", w)
			if len(got) == 0 {
				msg += "; got no warnings"
			} else {
				msg += fmt.Sprintf("; got %q", got)
			}
			out = append(out, Mismatch{Kind: MismatchMissingWarning, Message: msg})
		}
	}
	for i, g := range got {
		if !used[i] && !rendersViolation(g, violations) {
			out = append(out, Mismatch{Kind: MismatchUnexpectedWarning, Message: fmt.Sprintf("unexpected warning %q", g)})
		}
	}
	return out
}

func rendersViolation(w string, vs []webhook.Violation) bool {
	for _, v := range vs {
		if v.Action == webhook.ActionWarn && (w == v.Message || w == v.Field+": "+v.Message) {
			return true
		}
		if v.Action == webhook.ActionExempt && strings.HasPrefix(w, webhook.ExemptWarningPrefix) &&
			(strings.HasSuffix(w, "): "+v.Message) || strings.HasSuffix(w, "): "+v.Field+": "+v.Message)) {
			return true
		}
	}
	return false
}

// compareDefaults compares the object after defaulting with the expected
// values; the mismatch carries a diff of every expected path, a path
// absent from the object (or expected absent) missing from its side. A
// null in the object counts as absent: the apiserver drops it.
func compareDefaults(want Defaults, obj map[string]any) *Mismatch {
	if len(want) == 0 {
		return nil
	}
	wantAt, gotAt := map[string]any{}, map[string]any{}
	var wrong []string
	for _, d := range want {
		got, found := d.path.lookup(anyMap(obj))
		found = found && got != nil // null is absent, as the apiserver stores it
		if d.Value != nil {
			wantAt[d.Path] = d.Value
		}
		if found {
			gotAt[d.Path] = got
		}
		if (d.Value == nil) != !found || (found && !cmp.Equal(d.Value, got)) {
			wrong = append(wrong, d.Path)
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	return &Mismatch{
		Kind:    MismatchDefaults,
		Message: "the object after defaulting differs at " + strings.Join(wrong, ", "),
		Diff:    diff(wantAt, gotAt),
	}
}

// anyMap keeps a nil object from becoming a typed nil inside any.
func anyMap(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

// compareObject checks that obj contains want (a partial object).
func compareObject(want any, obj map[string]any) *Mismatch {
	got := project(anyMap(obj), want)
	w := stripNulls(want)
	if cmp.Equal(w, got) {
		return nil
	}
	return &Mismatch{
		Kind:    MismatchObject,
		Message: "the object after defaulting does not contain expect.object",
		Diff:    diff(w, got),
	}
}

// project restricts got to the shape of want: the keys want has (a key
// got lacks stays absent), list elements one by one. What remains is what
// must equal want for got to contain it.
func project(got, want any) any {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return got
		}
		out := map[string]any{}
		for k, wv := range w {
			if gv, ok := g[k]; ok && gv != nil { // null is absent
				out[k] = project(gv, wv)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			return got
		}
		out := make([]any, len(g))
		for i, gv := range g {
			if i < len(w) {
				out[i] = project(gv, w[i])
			} else {
				out[i] = gv
			}
		}
		return out
	}
	return got
}

// stripNulls drops null values from maps: a null in expect.object says
// the field is absent, which is how project leaves it.
func stripNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if e != nil {
				out[k] = stripNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stripNulls(e)
		}
		return out
	}
	return v
}

// diff is cmp.Diff with plain spaces: go-cmp mixes in non-breaking ones
// at random to keep its output from being compared verbatim, which
// readers and copy-paste do not need.
func diff(want, got any) string {
	return strings.ReplaceAll(cmp.Diff(want, got), "\u00a0", " ")
}

// Summary counts the cases of results.
func Summary(results []SuiteResult) (passed, failed int) {
	for _, r := range results {
		passed += r.Passed
		failed += r.Failed
	}
	return passed, failed
}
