package app

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/serve"
)

func init() {
	subcommands = append(subcommands, newServeCommand)
}

// newServeCommand is `shepherd serve`: serve.Options from the flags, then
// serve.Run until SIGTERM or an interrupt.
func newServeCommand() *cobra.Command {
	o := serve.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission webhook server and the lifecycle reconcilers",
		Long: `serve answers the kube-apiserver's admission calls for TrainJobs, (Cluster)TrainingRuntimes,
JobSets, PodCliqueSets, PodCliques and PodCliqueScalingGroups: the mutating webhook
(/mutate) applies the defaults as a JSON patch, the validating webhook (/validate)
runs the built-in CEL rules, the cluster's WorkloadPolicies (hot-reloaded) and the
lookups, and answers every violation at once as one 422 Invalid.

Every Deny, Warn and Audit verdict is audited: a log line, the metric
shepherd_policy_verdicts_total, a PolicyViolation Event and the ring served at
/audit on the metrics server (read it with ` + "`shepherd audit`" + `).

The lifecycle reconcilers (deadlines, TTL, Workloads, gang termination, training)
run on the leader replica only; admission runs on every replica, leader or not,
and keeps running while the apiserver is away (serve waits for it at start).
On SIGTERM /readyz fails, the reconcilers stop and the Lease is released, admission
is answered for --shutdown-drain-period, then serve finishes what is in flight,
writes the queued Events and exits 0.

Each framework (Trainer, JobSet, Grove) starts — its reconcilers and admission
lookups — once the cluster serves its CRDs, at start or later without a restart;
--framework-trainer, --framework-jobset and --framework-grove (auto|on|off) change
that.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Logs go where the command's errors go: stderr, or the
			// writer of whoever runs the command in-process (tests).
			o.LogTo(cmd.ErrOrStderr())
			o.Version = Version()
			return serve.Run(ctx, o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
