package corpus

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
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
			chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, !c.NoWorkloadAPI), Rules: seedcrds.Config(c.Config)})
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
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: seedcrds.Config(celrules.Config{})})
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

// TestCorpusThroughCarriers replays every case in the carrier form — its
// seed fields moved into their annotations — against the pinned upstream
// schemas, whose CRDs lack the seed fields: the verdict, the rules that
// fire, the warnings and the knob values after defaulting are the seed
// form's, and violations point at the annotation instead of the field.
// The one intended difference: D-PCS-2's terminationDelay 0s is not
// defaulted on Grove's own schema (Grove's webhook rejects it).
func TestCorpusThroughCarriers(t *testing.T) {
	cases, err := Load(Dir())
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for i := range cases {
		seed := &cases[i]
		carried := *seed
		carried.Object = ToCarriers(seed.Object)
		carried.OldObject = ToCarriers(seed.OldObject)
		carried.Context = nil
		for _, o := range seed.Context {
			carried.Context = append(carried.Context, ToCarriers(o))
		}
		t.Run(seed.Name, func(t *testing.T) {
			run := func(c *Case, cfg celrules.Config) (*webhook.Verdict, map[string]any) {
				objs := make([]runtime.Object, 0, len(c.Context))
				for _, o := range c.Context {
					objs = append(objs, o)
				}
				chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, !c.NoWorkloadAPI), Rules: cfg})
				if err != nil {
					t.Fatal(err)
				}
				v := chain.Admit(context.Background(), Request(t, c))
				return v, patched(t, c.Object.Object, v)
			}
			cfg := seed.Config
			cfg.Schemas = upstream
			sv, sObj := run(seed, seedcrds.Config(seed.Config))
			cv, cObj := run(&carried, cfg)
			if sv.Allowed != cv.Allowed {
				t.Errorf("allowed: seed form %v, carrier form %v; carrier violations %+v", sv.Allowed, cv.Allowed, cv.Violations)
			}
			var want, got []string
			for _, v := range sv.Violations {
				want = append(want, key(v.Rule, CarrierField(v.Field)))
			}
			for _, v := range cv.Violations {
				got = append(got, key(v.Rule, v.Field))
			}
			sort.Strings(want)
			sort.Strings(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("violations (-seed form +carrier form):\n%s\ncarrier: %+v", diff, cv.Violations)
			}
			if len(sv.Warnings) != len(cv.Warnings) {
				t.Errorf("warnings: seed form %q, carrier form %q", sv.Warnings, cv.Warnings)
			}
			for _, k := range KnobsOf(seed.Object) {
				if k.Name == grove.ScalingGroupTerminationDelay.Name {
					groups, _, _ := unstructured.NestedSlice(sObj, "spec", "template", "podCliqueScalingGroups")
					for _, g := range groups {
						name, _ := g.(map[string]any)["name"].(string)
						sd, sErr := grove.ScalingGroupDelay(sObj, name)
						cd, cErr := grove.ScalingGroupDelay(cObj, name)
						if fmt.Sprint(sd, sErr == nil) != fmt.Sprint(cd, cErr == nil) {
							t.Errorf("scaling group %s delay: seed form %v (%v), carrier form %v (%v)", name, sd, sErr, cd, cErr)
						}
					}
					continue
				}
				if k.Type == knob.Presence {
					if k.Present(sObj) != k.Present(cObj) {
						t.Errorf("knob %s: seed form %v, carrier form %v", k.Name, k.Present(sObj), k.Present(cObj))
					}
					continue
				}
				sRaw, sOK := k.Lookup(sObj)
				cRaw, cOK := k.Lookup(cObj)
				if sOK != cOK || (sOK && fmt.Sprint(sRaw.Value) != fmt.Sprint(cRaw.Value)) {
					t.Errorf("knob %s after defaulting: seed form %v (%v), carrier form %v (%v)", k.Name, sRaw.Value, sOK, cRaw.Value, cOK)
				}
				if cOK && cRaw.Form != knob.Annotation {
					t.Errorf("knob %s defaulted into the seed field on a schema without it", k.Name)
				}
			}
			for _, op := range cv.Patch {
				if strings.HasPrefix(op.Path, "/spec/workloadType") || strings.HasPrefix(op.Path, "/spec/trainingSpec") {
					t.Errorf("carrier form patched %s, a field the upstream schema prunes", op.Path)
				}
			}
		})
	}
}

// patched applies a verdict's patch to obj (a copy).
func patched(t *testing.T, obj map[string]any, v *webhook.Verdict) map[string]any {
	t.Helper()
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Patch) > 0 {
		p, err := json.Marshal(v.Patch)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := jsonpatch.DecodePatch(p)
		if err != nil {
			t.Fatal(err)
		}
		if doc, err = decoded.Apply(doc); err != nil {
			t.Fatalf("applying %s: %v", p, err)
		}
	}
	out := map[string]any{}
	if err := json.Unmarshal(doc, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
