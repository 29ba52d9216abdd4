package offline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/policytest"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// Suite is a loaded policy test suite (`shepherd test`) with the chain it
// runs against.
type Suite struct {
	Suite   *policytest.Suite
	chain   *webhook.Chain
	schemas *celrules.Schemas
}

// Run runs the suite's cases, each admitted as Admit does within timeout,
// with the suite's field validation (Strict unless it says Warn).
func (p *Suite) Run(ctx context.Context, timeout time.Duration) policytest.SuiteResult {
	validation := p.Suite.FieldValidation
	if validation == "" {
		validation = metav1.FieldValidationStrict
	}
	admit := func(ctx context.Context, op string, obj, old *unstructured.Unstructured) (*webhook.Verdict, error) {
		return Admit(ctx, p.chain, p.schemas, op, obj, old, validation, timeout)
	}
	return policytest.Run(ctx, p.Suite, admit)
}

// PrepareSuite loads a suite, reads its policies and context as check
// reads them, builds its chain as check does, and puts its objects in their
// namespaces. Every error names the file and line. No file it reads may
// hold more than limit bytes (--max-input-bytes).
func PrepareSuite(file string, cfg celrules.Config, limit int64) (*Suite, error) {
	if err := checkSuiteInputs(file, limit); err != nil {
		return nil, err
	}
	s, err := policytest.Load(file)
	if err != nil {
		return nil, err
	}
	resolved := func(ps []policytest.Path) []string {
		out := make([]string, 0, len(ps))
		for _, p := range ps {
			out = append(out, p.Resolved)
		}
		return out
	}
	if len(s.CRDs) > 0 {
		// The suite's own cluster schemas, as check --crd would take them.
		if cfg.Schemas, err = ReadSchemas(resolved(s.CRDs), limit, "--crd "); err != nil {
			return nil, fmt.Errorf("%s: crds: %w", file, err)
		}
	}
	ctxObjs, err := ReadManifests(resolved(s.Context), nil, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: context: %w", file, err)
	}
	policies, excs, err := ReadPolicies(resolved(s.Policies), nil, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: policies: %w", file, err)
	}
	chain, err := NewChain(cfg, ctxObjs, policies, excs, !s.NoWorkloadAPI)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i := range s.Cases {
		c := &s.Cases[i]
		DefaultNamespace(cfg.Schemas, &c.Object.Unstructured)
		if c.OldObject == nil {
			continue
		}
		DefaultNamespace(cfg.Schemas, &c.OldObject.Unstructured)
		// As check's --old: judging an UPDATE from another object would
		// report every differing field as a change.
		if diff := ObjectDiff(&c.Object.Unstructured, &c.OldObject.Unstructured); diff != "" {
			return nil, &policytest.Error{File: file, Line: c.Line, Msg: fmt.Sprintf("case %q: the old object is another object (%s); it must be the stored version of the same object (same group, kind, namespace and name)", c.Name, diff)}
		}
	}
	return &Suite{Suite: s, chain: chain, schemas: cfg.Schemas}, nil
}

// checkSuiteInputs bounds what policytest.Load reads whole, by path and
// without a limit: the suite file and its cases' object files. Each must be
// a regular file of at most limit bytes; the suite is read here (bounded)
// and parsed to find its object files, whose sizes are checked before Load
// reads anything. A device or a pipe has no size to check, and a suite's
// paths are relative to its directory, so neither is a suite's file. Other
// problems (a missing file, a malformed suite) are left to Load, which
// reports them all at once.
func checkSuiteInputs(file string, limit int64) error {
	info, err := os.Stat(file)
	if err != nil {
		return nil
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file: suites are read from files (their paths are relative to the suite's directory)", file)
	}
	b, err := ReadFileLimited(file, limit)
	if err != nil {
		if errors.As(err, new(*InputTooLargeError)) {
			return err
		}
		return nil
	}
	s, err := policytest.Parse(file, b)
	if err != nil {
		return nil
	}
	dir := filepath.Dir(file)
	for _, c := range s.Cases {
		for _, f := range []struct {
			path *policytest.Path
			what string
		}{{c.ObjectFile, "objectFile"}, {c.OldObjectFile, "oldObjectFile"}} {
			if f.path == nil {
				continue
			}
			p := f.path.Path
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			regular, err := CheckFileSize(p, limit)
			var tooLarge *InputTooLargeError
			switch {
			case errors.As(err, &tooLarge):
			case err == nil && !regular:
				err = fmt.Errorf("%s: not a regular file", p)
			default:
				continue
			}
			return &policytest.Error{File: file, Line: f.path.Line, Msg: fmt.Sprintf("case %q: %s: %v", c.Name, f.what, err)}
		}
	}
	return nil
}
