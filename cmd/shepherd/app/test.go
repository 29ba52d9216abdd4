package app

import (
	"context"
	"errors"
	"io"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/policytest"
	"github.com/shepherd-k8s/shepherd/printers"
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
	var prepared []*offline.Suite
	var errs []error
	for _, file := range files {
		p, err := offline.PrepareSuite(file, cfg, o.rules.maxInput.bytes())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// A suite none of whose cases --run selects is left out of the
		// report, as go test -run leaves out a package's other tests.
		if policytest.Select(p.Suite, run) > 0 {
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
		results = append(results, p.Run(ctx, o.timeout))
	}

	switch o.output {
	case outputJSON:
		err = policytest.WriteJSON(out, results)
	case outputYAML:
		// The report -o json writes, as YAML.
		passed, failed := policytest.Summary(results)
		err = printers.YAML(out, policytest.Report{Passed: passed, Failed: failed, Suites: results})
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
