package app

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/printers"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

type auditOptions struct {
	server     string
	token      string
	tokenFile  string
	kubeconfig string
	caFile     string
	insecure   bool
	timeout    time.Duration
	output     string

	namespace, rule, user, since string
	limit                        int

	// impact, with --policy, judges stored objects instead of reading a
	// server's verdicts.
	impact impactOptions
}

func init() {
	subcommands = append(subcommands, newAuditCommand)
}

func newAuditCommand() *cobra.Command {
	o := &auditOptions{server: "https://localhost:8443", timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print a shepherd server's recent verdicts, or what a new policy would deny",
		Long: `Without --policy, audit reads the ring of recent Deny, Warn and Audit verdicts that shepherd serve
keeps in memory and serves at /audit on its metrics server, and prints it as a
table (oldest first; -o text, the default) or as JSON or YAML (-o json,
-o yaml).

The metrics server authenticates callers with a bearer token and authorizes
them with a SubjectAccessReview for "get" on the non-resource URL /audit. The
token is --token, --token-file, or the bearer token of the kubeconfig's
current user. Against a server run with --metrics-secure=false (make run)
no token is needed.

With --policy FILE|DIR, audit is the dry run of policies that are not
applied yet: it reads, once, the objects the cluster of the kubeconfig holds
(or the manifests of -f, offline), judges a create of each through the same
chain as shepherd serve and check, and prints, per policy, the objects it
would deny, warn on or audit, with the field and message. Only the given
policies are reported unless --include-builtin. Against a cluster the
policies are type-checked against the CRDs it serves; the kubeconfig's user
needs list on those CRDs, on the workloads' kinds and on namespaces. Each
file of --policy and -f may hold at most --max-input-bytes (default 64Mi).
Exit status: 0, or 1 when any object would be denied; 2 on a usage error or
a policy that does not compile.

Examples:
  shepherd audit --policy max-gpus.yaml                      # against the current kubeconfig's cluster
  shepherd audit --policy policies/ -n research -o json
  shepherd audit --policy max-gpus.yaml -f manifests/        # offline
  shepherd audit --server https://localhost:8443 --insecure-skip-tls-verify
  shepherd audit --server http://127.0.0.1:8080 -n research --since 1h -o json
  shepherd audit --rule V-TJ-1 --user alice@example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := auditOutputs.resolve(&o.output, cmd.ErrOrStderr()); err != nil {
				return err
			}
			if len(o.impact.policies) > 0 {
				return runImpact(cmd.Context(), o, cmd.OutOrStdout())
			}
			if len(o.impact.files) > 0 || o.impact.includeBuiltin || len(o.impact.rules.crds) > 0 || len(o.impact.rules.disabled) > 0 || cmd.Flags().Changed(offline.MaxInputFlag) {
				return usageError("-f, --include-builtin, --crd, --disable-rule and --%s go with --policy", offline.MaxInputFlag)
			}
			return runAudit(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", o.server, "Base URL of shepherd's metrics server (http:// or https://).")
	f.StringVar(&o.token, "token", o.token, "Bearer token to authenticate with.")
	f.StringVar(&o.tokenFile, "token-file", o.tokenFile, "File holding the bearer token.")
	f.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig whose current user's bearer token is used when no --token is given (default: $KUBECONFIG or ~/.kube/config, if present).")
	f.StringVar(&o.caFile, "certificate-authority", o.caFile, "CA bundle to verify the metrics server's certificate.")
	f.BoolVar(&o.insecure, "insecure-skip-tls-verify", o.insecure, "Do not verify the metrics server's certificate (it is self-signed unless configured otherwise).")
	f.DurationVar(&o.timeout, "request-timeout", o.timeout, "Timeout of the request.")
	auditOutputs.addOutputFlag(cmd, &o.output)
	f.StringVarP(&o.namespace, "namespace", "n", o.namespace, "Only verdicts on objects in this namespace.")
	f.StringVar(&o.rule, "rule", o.rule, "Only verdicts of this rule (V-TJ-1, or a WorkloadPolicy's name).")
	f.StringVar(&o.user, "user", o.user, "Only verdicts on requests of this user.")
	f.StringVar(&o.since, "since", o.since, `Only verdicts since an RFC 3339 time or for a duration back from now ("1h").`)
	f.IntVar(&o.limit, "limit", o.limit, "Only the newest N verdicts (0: all the ring holds).")
	f.StringArrayVar(&o.impact.policies, "policy", nil, "File or directory of WorkloadPolicies, not yet applied, to judge the stored objects against, and of PolicyExceptions to honour (repeatable); switches audit to the dry run")
	f.StringArrayVarP(&o.impact.files, "filename", "f", nil, "With --policy: judge the objects of these manifest files or directories instead of the cluster's (repeatable); they are also what lookups see")
	f.BoolVar(&o.impact.includeBuiltin, "include-builtin", false, "With --policy: also report what the built-in rules find")
	webhook.AddDisableRuleFlag(f, &o.impact.rules.disabled, "With --policy: built-in rule IDs to switch off (repeatable or comma-separated)")
	f.StringArrayVar(&o.impact.rules.crds, "crd", nil, "With --policy -f: "+crdFlagUsage)
	addMaxInputFlag(f, &o.impact.rules.maxInput)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	return cmd
}

func runAudit(ctx context.Context, o *auditOptions, out io.Writer) error {
	q := audit.Query{Namespace: o.namespace, Rule: o.rule, User: o.user, Limit: o.limit}
	if o.since != "" {
		t, err := audit.ParseSince(o.since, time.Now())
		if err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("--since: %w", err)}
		}
		q.Since = t
	}
	base, err := url.Parse(o.server)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return &ExitError{Code: 2, Err: fmt.Errorf("--server %q: want a URL such as https://localhost:8443", o.server)}
	}
	httpClient, token, err := audit.ClientOptions{Token: o.token, TokenFile: o.tokenFile, Kubeconfig: o.kubeconfig, CAFile: o.caFile, Insecure: o.insecure}.Client()
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	list, err := audit.Fetch(ctx, httpClient, base, token, q)
	if err != nil {
		return err
	}
	switch o.output {
	case outputJSON:
		return printers.JSON(out, list)
	case outputYAML:
		return printers.YAML(out, list)
	}
	return printers.AuditTable(out, list.Items)
}
