package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/printers"
	"github.com/shepherd-k8s/shepherd/webhook"
)

type checkOptions struct {
	files         []string
	old           string
	context       []string
	policies      []string
	operation     string
	output        string
	noWorkloadAPI bool
	rules         ruleConfigFlags
	// fieldValidation is Strict or Warn, as kubectl's --validate.
	fieldValidation string
	// timeout bounds the admission of one object.
	timeout time.Duration
	// stdin is what a path "-" reads.
	stdin io.Reader
}

// defaultCheckTimeout is --timeout's default: far above what any object
// of a sane policy set takes (milliseconds), far below "it hangs".
const defaultCheckTimeout = 10 * time.Second

func init() {
	subcommands = append(subcommands, newCheckCommand)
}

func newCheckCommand() *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check -f FILE|DIR|- [-f ...] [--old FILE] [--context FILE ...] [--policy FILE|DIR ...] [--operation CREATE|UPDATE|DELETE] [--timeout 10s] [-o " + reportOutputs.choices() + "]",
		Short: "Run the admission chain (defaults, then validation) on manifests, without a cluster",
		Long: `check runs shepherd's admission chain — exactly what the webhook runs: the
defaulters, then every validation rule — on the objects of the given
manifests (multi-document YAML or JSON), offline.

--context supplies the objects lookups need (runtimes a TrainJob references,
the TrainJob owning a JobSet, the PodCliqueSet owning a PodClique, a
Namespace for namespaceSelectors). On CREATE the checked objects are
there too, as kubectl apply -f of them all would create them: a TrainJob
and its runtime in one directory are checked together. --policy adds WorkloadPolicies to the
built-in rules. The Workload API is assumed to be served unless
--no-workload-api. Kinds shepherd does not cover are allowed untouched.

"-f -" (or "-" for one of --old, --context, --policy) reads standard input.
Each file (each one of a directory too) and standard input may hold at
most --max-input-bytes (default 64Mi); a larger one is an error naming it,
found before anything is parsed. A directory without a manifest is an
error.
Every document needs apiVersion and kind. --old holds the stored objects:
each is paired with the object of the same group, kind, namespace and name
(a single --old object with a single object, which must be the same one).
A field of the wrong type for the kind's schema is denied as the apiserver
would deny it, naming the field and the type, and no rule runs on the
object. --timeout bounds the time one object's admission (defaults and every
rule) may take.

Exit status: 0 when every object is allowed, 1 when any is denied, 2 on a
usage or parse error (file and line): a document without apiVersion or
kind, a file or input larger than --max-input-bytes, an --old object that
is not the same object, an object whose admission takes longer than
--timeout.`,
		Example: `  shepherd check -f trainjob.yaml --context runtimes/
  shepherd check -f pcs.yaml --old pcs-live.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := reportOutputs.resolve(&o.output, cmd.ErrOrStderr()); err != nil {
				return err
			}
			o.stdin = cmd.InOrStdin()
			return runCheck(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifest file or directory to check, - for standard input (repeatable)")
	f.StringVar(&o.old, "old", "", "the stored object(s) for an UPDATE (or DELETE); implies --operation UPDATE")
	f.StringArrayVar(&o.context, "context", nil, "file or directory of objects for lookups (repeatable)")
	f.StringArrayVar(&o.policies, "policy", nil, "file or directory of WorkloadPolicies to add to the built-in rules, and of PolicyExceptions to honour (repeatable)")
	f.StringVar(&o.operation, "operation", "", "CREATE, UPDATE or DELETE (default CREATE, UPDATE with --old)")
	reportOutputs.addOutputFlag(cmd, &o.output)
	f.BoolVar(&o.noWorkloadAPI, "no-workload-api", false, "judge as if the cluster did not serve the Workload API (V-TR-7)")
	webhook.AddDisableRuleFlag(f, &o.rules.disabled, "rule IDs to switch off (repeatable or comma-separated)")
	f.StringArrayVar(&o.rules.crds, "crd", nil, crdFlagUsage)
	f.DurationVar(&o.timeout, "timeout", defaultCheckTimeout, "wall-clock limit for admitting one object (defaults and every rule); an object that takes longer is an error (exit 2) naming its file and line")
	f.StringVar(&o.fieldValidation, "field-validation", metav1.FieldValidationStrict, "how fields the target schema lacks are treated, as the apiserver does: Strict (kubectl's default) denies the object, Warn warns and judges it without them")
	addMaxInputFlag(f, &o.rules.maxInput)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	return cmd
}

func usageError(format string, args ...any) error {
	return &ExitError{Code: 2, Err: fmt.Errorf(format, args...)}
}

func runCheck(ctx context.Context, o *checkOptions, out io.Writer) error {
	chainRules, err := o.rules.config()
	if err != nil {
		return err
	}
	results, err := offline.CheckFiles(ctx, offline.CheckFilesInput{
		Files: o.files, Old: o.old, Context: o.context, Policies: o.policies, Stdin: o.stdin, MaxInput: o.rules.maxInput.bytes(),
		Operation: o.operation, FieldValidation: o.fieldValidation, Timeout: o.timeout, WorkloadAPI: !o.noWorkloadAPI,
		Rules: chainRules, KeepObjects: o.output != outputText,
	})
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if err := printers.CheckResults(out, o.output, results); err != nil {
		return err
	}
	for _, r := range results {
		if !r.Allowed {
			return &ExitError{Code: 1}
		}
	}
	return nil
}

// parseFailure is a file that cannot be read or parsed: a usage error.
func parseFailure(err error) error { return &ExitError{Code: 2, Err: err} }
