package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/printers"
	"github.com/shepherd-k8s/shepherd/webhook"
)

type exportOptions struct {
	policies  []string
	output    string
	namespace string
	rules     ruleConfigFlags
	// D-PCS-5 and D-JS-2's configuration, for map: serve's flags of the
	// same names.
	disableStartupPolicyRewrite bool
	inferenceTerminationDelay   time.Duration
	// audit adds Audit to every exported binding's validationActions (vap):
	// the native admission mode's policies (serve/native.go).
	audit bool
}

func init() {
	subcommands = append(subcommands, newExportCommand)
}

func newExportCommand() *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export shepherd's rules: as ValidatingAdmissionPolicies (vap), its defaults as MutatingAdmissionPolicies (map), or as a list (rules)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &ExitError{Code: 2, Err: fmt.Errorf("export needs a subcommand: vap, map or rules")}
		},
	}
	cmd.PersistentFlags().StringArrayVar(&o.policies, "policy", nil, "file or directory of WorkloadPolicies to export with the built-in rules, and of PolicyExceptions the exported policies honour (repeatable)")
	webhook.AddDisableRuleFlag(cmd.PersistentFlags(), &o.rules.disabled, "rule IDs to leave out (repeatable or comma-separated)")
	cmd.PersistentFlags().StringArrayVar(&o.rules.crds, "crd", nil, crdFlagUsage)
	cmd.PersistentFlags().StringVar(&o.rules.kubeconfig, "kubeconfig", "", "kubeconfig of the target cluster: type-check against the Trainer, JobSet and Grove CRDs it serves (instead of --crd; needs list on customresourcedefinitions)")
	cmd.PersistentFlags().StringVar(&o.namespace, "namespace", api.DefaultNamespace, "shepherd's namespace: exported bindings leave it and kube-system out, as shepherd's webhooks do")
	addMaxInputFlag(cmd.PersistentFlags(), &o.rules.maxInput)

	vap := &cobra.Command{
		Use:   "vap",
		Short: "Write a ValidatingAdmissionPolicy and binding for every exportable rule",
		Long: `vap writes, as multi-document YAML on stdout, an
admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and
ValidatingAdmissionPolicyBinding for every exportable rule: the built-in CEL
rules and the given WorkloadPolicies. Deny, Warn and Audit become the
binding's validationActions. Rules that cannot be exported (lookups of other
objects, discovery, defaulting) are listed on stderr with the reason.`,
		Example: `  shepherd export vap | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExportVAP(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	vap.Flags().BoolVar(&o.audit, "audit", false, "add Audit to every binding's validationActions (Deny+Audit, Warn+Audit): the apiserver then reports each failed validation in its audit events, which shepherd serve --admission-mode=native records through its audit sink (deploy/native's policies)")
	mapCmd := &cobra.Command{
		Use:   "map",
		Short: "Write a MutatingAdmissionPolicy and binding for every exportable defaulting rule",
		Long: `map writes, as multi-document YAML on stdout, an
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy and
MutatingAdmissionPolicyBinding for every defaulting rule a policy can
express (D-PCS-1..6, D-JS-1, D-JS-2): the same defaults shepherd's mutating
webhook gives, seed knobs written where the target schemas (--crd) keep them
(the seed field, or its shepherd.dev/ carrier annotation). Each policy is
type-checked against those schemas. Rules that cannot be exported (D-WL-1
needs lookups), or that would do nothing under this configuration, are
listed on stderr with the reason. Of --policy, only PolicyExceptions
count (WorkloadPolicies only validate): a defaulter they name skips the
objects they select. The apiserver has no clock, so an exception's expiry
is written in the policy's shepherd.dev/exceptions-expire annotation;
export again after it.`,
		Example: `  shepherd export map --inference-termination-delay 4h | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExportMAP(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	mapCmd.Flags().BoolVar(&o.disableStartupPolicyRewrite, "disable-startup-policy-rewrite", false, "as serve's flag: D-JS-2 is off (V-JS-5 still warns of InOrder), so no policy is written for it")
	mapCmd.Flags().DurationVar(&o.inferenceTerminationDelay, "inference-termination-delay", 0, "as serve's flag: D-PCS-5's terminationDelay for Inference PodCliqueSets that set none; 0 writes no D-PCS-5 policy")
	rules := &cobra.Command{
		Use:   "rules",
		Short: "List every rule: ID, kinds, action, exportable",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := reportOutputs.resolve(&o.output, cmd.ErrOrStderr()); err != nil {
				return err
			}
			return runExportRules(o, cmd.OutOrStdout())
		},
	}
	reportOutputs.addOutputFlag(rules, &o.output)
	cmd.AddCommand(vap, mapCmd, rules)
	for _, c := range []*cobra.Command{cmd, vap, mapCmd, rules} {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	}
	return cmd
}

// exportChain builds the chain with the given policies loaded.
func exportChain(o *exportOptions) (*webhook.Chain, error) {
	policies, excs, err := offline.ReadPolicies(o.policies, nil, o.rules.maxInput.bytes())
	if err != nil {
		return nil, parseFailure(err)
	}
	cfg, err := o.rules.config()
	if err != nil {
		return nil, err
	}
	cfg.Namespace = o.namespace
	return offline.NewChain(cfg, nil, policies, excs, true)
}

func runExportVAP(o *exportOptions, out, errOut io.Writer) error {
	chain, err := exportChain(o)
	if err != nil {
		return err
	}
	vaps, bindings, notes := offline.ExportVAPs(chain, o.audit, time.Now())
	if err := writePolicies(out, vaps, bindings); err != nil {
		return err
	}
	_, err = io.WriteString(errOut, strings.Join(notes, ""))
	return err
}

// writePolicies writes each policy followed by its binding, as
// multi-document YAML, in one write.
func writePolicies[P, B any](out io.Writer, policies []P, bindings []B) error {
	var sb strings.Builder
	for i := range policies {
		for _, obj := range []any{policies[i], bindings[i]} {
			b, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			sb.WriteString("---\n")
			sb.Write(b)
		}
	}
	_, err := io.WriteString(out, sb.String())
	return err
}

func runExportMAP(o *exportOptions, out, errOut io.Writer) error {
	if o.inferenceTerminationDelay < 0 {
		return usageError("--inference-termination-delay must not be negative, got %v", o.inferenceTerminationDelay)
	}
	cfg, err := o.rules.config()
	if err != nil {
		return err
	}
	cfg.Namespace = o.namespace
	cfg.DisableStartupPolicyRewrite = o.disableStartupPolicyRewrite
	if o.inferenceTerminationDelay > 0 {
		cfg.InferenceTerminationDelay = &metav1.Duration{Duration: o.inferenceTerminationDelay}
	}
	// Of --policy, only the PolicyExceptions: WorkloadPolicies validate.
	wps, excs, err := offline.ReadPolicies(o.policies, nil, o.rules.maxInput.bytes())
	if err != nil {
		return parseFailure(err)
	}
	policies, bindings, notes, err := offline.ExportMAPs(cfg, wps, excs, time.Now())
	if err != nil {
		return err
	}
	if err := writePolicies(out, policies, bindings); err != nil {
		return err
	}
	_, err = io.WriteString(errOut, strings.Join(notes, ""))
	return err
}

func runExportRules(o *exportOptions, out io.Writer) error {
	chain, err := exportChain(o)
	if err != nil {
		return err
	}
	rules := chain.Rules()
	if rules == nil {
		rules = []celrules.RuleInfo{}
	}
	switch o.output {
	case outputJSON:
		return printers.JSON(out, rules)
	case outputYAML:
		b, err := yaml.Marshal(rules)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	return printers.RulesTable(out, rules)
}
