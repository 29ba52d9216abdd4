package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/shepherd-k8s/shepherd/serve"
)

// ServeMain runs shepherd serve with command-line args (a leading "serve"
// is skipped) until ctx ends, logging to log: serve composed from its
// package, as cmd/shepherd composes it, so the suites never run cmd.
func ServeMain(ctx context.Context, args []string, log io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	o := serve.DefaultOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(log)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.LogTo(log)
	o.Version = "test"
	return serve.Run(ctx, o)
}

// ServeChild runs serve in a child process of a test binary (a replica)
// until SIGTERM or an interrupt, and returns its exit code: 0, or 2 with
// the error on stderr, as `shepherd serve` exits.
func ServeChild(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ServeMain(ctx, args, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shepherd:", err)
		return 2
	}
	return 0
}
