// Package app is the shepherd command line: one binary with the subcommands
// serve, check, test, export, audit and version. Each subcommand lives in its own
// file and registers itself with the root command.
package app

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// ExitError carries a specific exit code out of a subcommand: `shepherd
// check` exits 1 when an object is denied and 2 on usage or parse errors.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// subcommands are added by each subcommand's file in init.
var subcommands []func() *cobra.Command

// NewRootCommand builds the shepherd command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "shepherd",
		Short: "Admission policy and lifecycle for AI workloads on Kubernetes",
		Long: `shepherd defaults and validates Kubeflow Trainer, Grove, JobSet and
Workload/PodGroup objects at admission with a CEL policy engine, exports its
rules as ValidatingAdmissionPolicy, audits every rejected spec, and enforces
lifecycle: TrainJob deadlines and TTL, Grove gang termination, training
restart budgets and runtime limits, Workload/PodGroup creation.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, sub := range subcommands {
		root.AddCommand(sub())
	}
	completeRuleIDs(root)
	flagNoticesTo(root, stderr)
	return root
}

// flagNoticesTo sends pflag's notices (a deprecated flag's) to w. cobra
// would print them on the command's standard output, ahead of the output of
// check -o json and the like, which they would make unparseable.
func flagNoticesTo(cmd *cobra.Command, w io.Writer) {
	cmd.Flags().SetOutput(w)
	for _, sub := range cmd.Commands() {
		flagNoticesTo(sub, w)
	}
}

// ruleIDFlags are the flags that take built-in rule IDs.
var ruleIDFlags = []string{"disable-rule", "disable-rules"}

// completeRuleIDs makes the shell complete built-in rule IDs for every
// flag of ruleIDFlags, on whichever command defines it.
func completeRuleIDs(cmd *cobra.Command) {
	for _, name := range ruleIDFlags {
		if cmd.LocalNonPersistentFlags().Lookup(name) != nil || cmd.PersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				ids, err := webhook.BuiltinRuleIDs()
				if err != nil {
					return nil, cobra.ShellCompDirectiveError
				}
				// The flag takes a comma-separated list: complete its last ID.
				done, last := "", toComplete
				if i := strings.LastIndex(toComplete, ","); i >= 0 {
					done, last = toComplete[:i+1], toComplete[i+1:]
				}
				var out []string
				for _, id := range ids {
					if strings.HasPrefix(id, last) {
						out = append(out, done+id)
					}
				}
				return out, cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	for _, sub := range cmd.Commands() {
		completeRuleIDs(sub)
	}
}

// Main runs the command line with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		if exit.Err != nil {
			fmt.Fprintln(stderr, "shepherd:", exit.Err)
		}
		return exit.Code
	}
	fmt.Fprintln(stderr, "shepherd:", err)
	return 2
}
