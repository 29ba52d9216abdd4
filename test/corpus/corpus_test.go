package corpus

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// Request builds the admission request of a case.
func Request(t testing.TB, c *Case) *webhook.Request {
	t.Helper()
	gvk := c.Object.GroupVersionKind()
	req := &webhook.Request{
		UID:       "corpus",
		Operation: admissionv1.Operation(c.OperationOrDefault()),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: c.Object.GetNamespace(),
		Name:      c.Object.GetName(),
	}
	var err error
	if req.Object, err = json.Marshal(c.Object.Object); err != nil {
		t.Fatal(err)
	}
	if c.OldObject != nil {
		if req.OldObject, err = json.Marshal(c.OldObject.Object); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

func key(rule, field string) string { return rule + " " + field }

func TestCorpusThroughChain(t *testing.T) {
	cases, err := Load(Dir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range cases {
		c := &cases[i]
		t.Run(c.Name, func(t *testing.T) {
			objs := make([]runtime.Object, 0, len(c.Context))
			for _, o := range c.Context {
				objs = append(objs, o)
			}
			chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, !c.NoWorkloadAPI), Rules: c.Config})
			if err != nil {
				t.Fatal(err)
			}
			v := chain.Admit(context.Background(), Request(t, c))
			if v.Allowed != c.WantAllowed {
				t.Errorf("allowed = %v, want %v; violations: %+v", v.Allowed, c.WantAllowed, v.Violations)
			}
			var got, want []string
			for _, viol := range v.Violations {
				got = append(got, key(viol.Rule, viol.Field))
			}
			for _, w := range c.WantViolations {
				want = append(want, key(w.Rule, w.Field))
			}
			sort.Strings(got)
			sort.Strings(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s\nall: %+v", diff, v.Violations)
			}
			if len(v.Warnings) != len(c.WantWarnings) {
				t.Errorf("warnings = %q, want %d matching %q", v.Warnings, len(c.WantWarnings), c.WantWarnings)
			}
			for _, w := range c.WantWarnings {
				found := false
				for _, g := range v.Warnings {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no warning contains %q; warnings: %q", w, v.Warnings)
				}
			}
			var paths []string
			for _, op := range v.Patch {
				paths = append(paths, op.Path)
			}
			sort.Strings(paths)
			wantPaths := append([]string(nil), c.WantPatchPaths...)
			sort.Strings(wantPaths)
			if diff := cmp.Diff(wantPaths, paths); diff != "" {
				t.Errorf("patch paths (-want +got):\n%s\npatch: %s", diff, fmt.Sprint(v.Patch))
			}
			for _, viol := range v.Violations {
				if viol.Message == "" {
					t.Errorf("violation %+v has no message", viol)
				}
			}
		})
	}
}

// TestCorpusCoversEveryRule checks that every rule the chain lists has at
// least one allowed and one denied (or, for Warn rules and defaulters,
// one firing and one quiet) case, and UPDATE cases for transition rules.
func TestCorpusCoversEveryRule(t *testing.T) {
	cases, err := Load(Dir())
	if err != nil {
		t.Fatal(err)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type cover struct{ fires, quiet, update bool }
	seen := map[string]*cover{}
	for _, c := range cases {
		cv := seen[c.Rule]
		if cv == nil {
			cv = &cover{}
			seen[c.Rule] = cv
		}
		// A defaulter fires when it patches; a validation rule when it
		// reports a violation.
		fires := false
		if strings.HasPrefix(c.Rule, "D-") {
			fires = len(c.WantPatchPaths) > 0
		}
		for _, w := range c.WantViolations {
			fires = fires || w.Rule == c.Rule
		}
		if fires {
			cv.fires = true
		} else {
			cv.quiet = true
		}
		cv.update = cv.update || c.OperationOrDefault() == "UPDATE"
	}
	transition := map[string]bool{"V-TJ-2": true, "V-TJ-4": true, "V-PCS-5": true, "V-PCS-6": true, "V-JS-2": true, "V-PCLQ-1": true}
	for _, r := range chain.Rules() {
		cv := seen[r.ID]
		switch {
		case cv == nil:
			t.Errorf("rule %s has no corpus case", r.ID)
		case !cv.fires || !cv.quiet:
			t.Errorf("rule %s needs a case where it fires and one where it does not (fires %v, quiet %v)", r.ID, cv.fires, cv.quiet)
		case transition[r.ID] && !cv.update:
			t.Errorf("transition rule %s has no UPDATE case", r.ID)
		}
	}
}
