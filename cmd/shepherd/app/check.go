package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
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
	if ctx == nil {
		ctx = context.Background()
	}
	if len(o.files) == 0 {
		return usageError("check needs at least one -f FILE|DIR")
	}
	switch o.fieldValidation {
	case metav1.FieldValidationStrict, metav1.FieldValidationWarn:
	case "":
		o.fieldValidation = metav1.FieldValidationStrict
	default:
		return usageError("--field-validation must be Strict or Warn, got %q", o.fieldValidation)
	}
	op := strings.ToUpper(o.operation)
	if op == "" {
		op = "CREATE"
		if o.old != "" {
			op = "UPDATE"
		}
	}
	switch op {
	case "CREATE":
		if o.old != "" {
			return usageError("--old goes with --operation UPDATE or DELETE")
		}
	case "UPDATE", "DELETE":
	default:
		return usageError("--operation must be CREATE, UPDATE or DELETE, got %q", o.operation)
	}
	if op == "UPDATE" && o.old == "" {
		return usageError("--operation UPDATE needs --old FILE with the stored object")
	}
	if o.timeout <= 0 {
		return usageError("--timeout must be positive, got %v", o.timeout)
	}
	readsStdin := 0
	for _, paths := range [][]string{o.files, {o.old}, o.context, o.policies} {
		for _, p := range paths {
			if p == offline.StdinPath {
				readsStdin++
			}
		}
	}
	if readsStdin > 1 {
		return usageError("standard input (-) can be read only once: give it to one of -f, --old, --context, --policy")
	}

	limit := o.rules.maxInput.bytes()
	objects, err := offline.ReadManifests(o.files, o.stdin, limit)
	if err != nil {
		return parseFailure(err)
	}
	var olds []offline.Manifest
	if o.old != "" {
		if olds, err = offline.ReadManifests([]string{o.old}, o.stdin, limit); err != nil {
			return parseFailure(err)
		}
	}
	ctxObjs, err := offline.ReadManifests(o.context, o.stdin, limit)
	if err != nil {
		return parseFailure(err)
	}
	if op == "CREATE" {
		// Created together, as by kubectl apply -f of the same files: a
		// TrainJob's runtime in the same directory exists for V-TJ-3.
		for _, m := range objects {
			ctxObjs = append(ctxObjs, offline.Manifest{Obj: m.Obj.DeepCopy(), File: m.File, Line: m.Line})
		}
	}
	policies, excs, err := offline.ReadPolicies(o.policies, o.stdin, limit)
	if err != nil {
		return parseFailure(err)
	}

	chainRules, err := o.rules.config()
	if err != nil {
		return err
	}
	chain, err := offline.NewChain(chainRules, ctxObjs, policies, excs, !o.noWorkloadAPI)
	if err != nil {
		return err
	}

	results, err := offline.Check(ctx, offline.CheckInput{
		Chain: chain, Schemas: chainRules.Schemas, Operation: op, Objects: objects, Olds: olds,
		FieldValidation: o.fieldValidation, Timeout: o.timeout, KeepObjects: o.output != outputText,
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

func parseFailure(err error) error {
	var pe *offline.ParseError
	if errors.As(err, &pe) {
		return &ExitError{Code: 2, Err: pe}
	}
	return &ExitError{Code: 2, Err: err}
}
