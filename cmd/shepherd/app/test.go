package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/policytest"
	"github.com/shepherd-k8s/shepherd/webhook"
)

type testOptions struct {
	output  string
	verbose bool
	run     string
	rules   ruleConfigFlags
	timeout time.Duration
}

func init() {
	subcommands = append(subcommands, newTestCommand)
}

func newTestCommand() *cobra.Command {
	o := &testOptions{}
	cmd := &cobra.Command{
		Use:   "test PATH... [-o " + testOutputs.choices() + "] [-v] [--run REGEXP] [--crd FILE|DIR ...] [--disable-rule ID ...] [--timeout 10s]",
		Short: "Run declarative policy test suites (*-test.yaml) through the admission chain, without a cluster",
		Long: `test runs the suites in the given files and directories (directories are
searched recursively for files named *-test.yaml; testdata and hidden
directories below them are skipped). A suite names WorkloadPolicy files and
context objects and lists cases: an object (and for an UPDATE its stored
version) and the expected result — allowed or denied, the exact set of
violations (rule and field), warnings, values after defaulting. Each suite
runs through the chain ` + "`shepherd check`" + ` builds from the same
policies and context; the built-in rules are always on. The format is in
policytest/FORMAT.md. A suite file, an object file and each file of a
suite's policies and context may hold at most --max-input-bytes (default
64Mi); suites and object files are read from regular files only.

Exit status: 0 when every case passes, 1 when any case does not (every
mismatch is listed), 2 on a usage error or a suite that cannot be loaded
(file and line).`,
		Example: `  shepherd test examples/policies/
  shepherd test policies/ -o junit > report.xml
  shepherd test celrules/rules/tests --run '^tj-deadline'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := testOutputs.resolve(&o.output, cmd.ErrOrStderr()); err != nil {
				return err
			}
			return runTest(cmd.Context(), o, args, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	testOutputs.addOutputFlag(cmd, &o.output)
	f.BoolVarP(&o.verbose, "verbose", "v", false, "text output lists passing cases too")
	f.StringVar(&o.run, "run", "", "run only the cases whose name, or SUITE/NAME, matches this regular expression (Go syntax, as go test -run)")
	webhook.AddDisableRuleFlag(f, &o.rules.disabled, "rule IDs to switch off (repeatable or comma-separated): which cases would then fail")
	f.StringArrayVar(&o.rules.crds, "crd", nil, crdFlagUsage+"; a suite's crds take precedence")
	f.DurationVar(&o.timeout, "timeout", defaultCheckTimeout, "wall-clock limit for admitting one case's object; a case that takes longer fails with an error")
	addMaxInputFlag(f, &o.rules.maxInput)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	return cmd
}

// preparedSuite is a loaded suite with the chain it runs against.
type preparedSuite struct {
	suite   *policytest.Suite
	chain   *webhook.Chain
	schemas *celrules.Schemas
}

func runTest(ctx context.Context, o *testOptions, paths []string, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(paths) == 0 {
		return usageError("test needs at least one suite file or directory (suites are files named *%s)", policytest.SuffixTest)
	}
	if o.timeout <= 0 {
		return usageError("--timeout must be positive, got %v", o.timeout)
	}
	var run *regexp.Regexp
	if o.run != "" {
		var err error
		if run, err = regexp.Compile(o.run); err != nil {
			return usageError("--run %q is not a regular expression: %v", o.run, err)
		}
	}
	files, err := policytest.Discover(paths)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	cfg, err := o.rules.config()
	if err != nil {
		return err
	}
	// Load every suite before running any: a run reports every broken
	// suite at once, and runs nothing from a half-valid set.
	var prepared []preparedSuite
	var errs []error
	for _, file := range files {
		p, err := prepareSuite(file, cfg, o.rules.maxInput.bytes())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// A suite none of whose cases --run selects is left out of the
		// report, as go test -run leaves out a package's other tests.
		if policytest.Select(p.suite, run) > 0 {
			prepared = append(prepared, p)
		}
	}
	if len(errs) > 0 {
		return &ExitError{Code: 2, Err: errors.Join(errs...)}
	}
	if run != nil && len(prepared) == 0 {
		return usageError("--run %q matches no case of the %d suites in %v", o.run, len(files), paths)
	}

	results := make([]policytest.SuiteResult, 0, len(prepared))
	for _, p := range prepared {
		validation := p.suite.FieldValidation
		if validation == "" {
			validation = metav1.FieldValidationStrict
		}
		chain, schemas := p.chain, p.schemas
		admit := func(ctx context.Context, op string, obj, old *unstructured.Unstructured) (*webhook.Verdict, error) {
			return offline.Admit(ctx, chain, schemas, op, obj, old, validation, o.timeout)
		}
		results = append(results, policytest.Run(ctx, p.suite, admit))
	}

	switch o.output {
	case outputJSON:
		err = policytest.WriteJSON(out, results)
	case outputYAML:
		// The report -o json writes, as YAML.
		passed, failed := policytest.Summary(results)
		err = writeYAML(out, policytest.Report{Passed: passed, Failed: failed, Suites: results})
	case "junit":
		err = policytest.WriteJUnit(out, results)
	default:
		err = policytest.WriteText(out, results, o.verbose)
	}
	if err != nil {
		return err
	}
	if _, failed := policytest.Summary(results); failed > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// prepareSuite loads a suite, reads its policies and context with check's
// readers, builds its chain as check does, and puts its objects in their
// namespaces. Every error names the file and line. No file it reads may
// hold more than limit bytes (--max-input-bytes).
func prepareSuite(file string, cfg celrules.Config, limit int64) (preparedSuite, error) {
	if err := checkSuiteInputs(file, limit); err != nil {
		return preparedSuite{}, err
	}
	s, err := policytest.Load(file)
	if err != nil {
		return preparedSuite{}, err
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
		if cfg, err = (&ruleConfigFlags{disabled: cfg.DisabledRules, crds: resolved(s.CRDs), maxInput: inputLimit(limit)}).config(); err != nil {
			var exit *ExitError
			if errors.As(err, &exit) && exit.Err != nil {
				err = exit.Err
			}
			return preparedSuite{}, fmt.Errorf("%s: crds: %w", file, err)
		}
	}
	ctxObjs, err := offline.ReadManifests(resolved(s.Context), nil, limit)
	if err != nil {
		return preparedSuite{}, fmt.Errorf("%s: context: %w", file, err)
	}
	policies, excs, err := offline.ReadPolicies(resolved(s.Policies), nil, limit)
	if err != nil {
		return preparedSuite{}, fmt.Errorf("%s: policies: %w", file, err)
	}
	chain, err := offline.NewChain(cfg, ctxObjs, policies, excs, !s.NoWorkloadAPI)
	if err != nil {
		var exit *ExitError
		if errors.As(err, &exit) && exit.Err != nil {
			err = exit.Err
		}
		return preparedSuite{}, fmt.Errorf("%s: %w", file, err)
	}
	for i := range s.Cases {
		c := &s.Cases[i]
		offline.DefaultNamespace(cfg.Schemas, &c.Object.Unstructured)
		if c.OldObject == nil {
			continue
		}
		offline.DefaultNamespace(cfg.Schemas, &c.OldObject.Unstructured)
		// As check's --old: judging an UPDATE from another object would
		// report every differing field as a change.
		if diff := offline.ObjectDiff(&c.Object.Unstructured, &c.OldObject.Unstructured); diff != "" {
			return preparedSuite{}, &policytest.Error{File: file, Line: c.Line, Msg: fmt.Sprintf("case %q: the old object is another object (%s); it must be the stored version of the same object (same group, kind, namespace and name)", c.Name, diff)}
		}
	}
	return preparedSuite{suite: s, chain: chain, schemas: cfg.Schemas}, nil
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
	b, err := offline.ReadFileLimited(file, limit)
	if err != nil {
		if errors.As(err, new(*offline.InputTooLargeError)) {
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
			regular, err := offline.CheckFileSize(p, limit)
			var tooLarge *offline.InputTooLargeError
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
