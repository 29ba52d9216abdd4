package app

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

type exportOptions struct {
	policies  []string
	output    string
	namespace string
	rules     ruleConfigFlags
}

func init() {
	subcommands = append(subcommands, newExportCommand)
}

func newExportCommand() *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export shepherd's rules: as ValidatingAdmissionPolicies (vap) or as a list (rules)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &ExitError{Code: 2, Err: fmt.Errorf("export needs a subcommand: vap or rules")}
		},
	}
	cmd.PersistentFlags().StringArrayVar(&o.policies, "policy", nil, "file or directory of WorkloadPolicies to export with the built-in rules (repeatable)")
	cmd.PersistentFlags().StringSliceVar(&o.rules.disabled, "disable-rule", nil, "rule IDs to leave out (repeatable or comma-separated)")
	cmd.PersistentFlags().StringArrayVar(&o.rules.crds, "crd", nil, crdFlagUsage)
	cmd.PersistentFlags().StringVar(&o.namespace, "namespace", api.DefaultNamespace, "shepherd's namespace: exported bindings leave it and kube-system out, as shepherd's webhooks do")

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
	rules := &cobra.Command{
		Use:   "rules",
		Short: "List every rule: ID, kinds, action, exportable",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExportRules(o, cmd.OutOrStdout())
		},
	}
	rules.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	cmd.AddCommand(vap, rules)
	for _, c := range []*cobra.Command{cmd, vap, rules} {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	}
	return cmd
}

// exportChain builds the chain with the given policies loaded.
func exportChain(o *exportOptions) (*webhook.Chain, error) {
	policies, err := readPolicies(o.policies)
	if err != nil {
		return nil, parseFailure(err)
	}
	cfg, err := o.rules.config()
	if err != nil {
		return nil, err
	}
	cfg.Namespace = o.namespace
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: cfg})
	if err != nil {
		return nil, err
	}
	for _, p := range policies {
		if errs := chain.SetPolicy(p); len(errs) > 0 {
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("WorkloadPolicy %q does not compile:\n%s", p.Name, indent(errs.ToAggregate().Error()))}
		}
	}
	return chain, nil
}

func runExportVAP(o *exportOptions, out, errOut io.Writer) error {
	chain, err := exportChain(o)
	if err != nil {
		return err
	}
	vaps, bindings := chain.Engine().Export()
	var sb strings.Builder
	for i := range vaps {
		for _, obj := range []any{vaps[i], bindings[i]} {
			b, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			sb.WriteString("---\n")
			sb.Write(b)
		}
	}
	if _, err := io.WriteString(out, sb.String()); err != nil {
		return err
	}
	for _, r := range chain.Rules() {
		if r.Inactive != "" && r.Enabled {
			fmt.Fprintf(errOut, "inactive: %s (%s): %s\n", r.ID, strings.Join(r.Kinds, ", "), r.Inactive)
			continue
		}
		if !r.Exportable && r.Enabled {
			fmt.Fprintf(errOut, "not exported: %s (%s): %s\n", r.ID, strings.Join(r.Kinds, ", "), r.Reason)
		}
	}
	return nil
}

func runExportRules(o *exportOptions, out io.Writer) error {
	switch o.output {
	case "text", "json", "yaml":
	default:
		return usageError("-o must be text, json or yaml, got %q", o.output)
	}
	chain, err := exportChain(o)
	if err != nil {
		return err
	}
	rules := chain.Rules()
	if rules == nil {
		rules = []celrules.RuleInfo{}
	}
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(rules, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(rules)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKINDS\tACTION\tEXPORTABLE\tENABLED\tDESCRIPTION")
	for _, r := range rules {
		exportable := "yes"
		if !r.Exportable {
			exportable = "no: " + shortReason(r.Reason)
		}
		enabled := "yes"
		if !r.Enabled {
			enabled = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, strings.Join(r.Kinds, ","), r.Action, exportable, enabled, r.Description)
	}
	return tw.Flush()
}

// shortReason keeps the first clause of a reason for the table.
func shortReason(r string) string {
	if i := strings.IndexAny(r, ";("); i > 0 {
		return strings.TrimSpace(r[:i])
	}
	return r
}
