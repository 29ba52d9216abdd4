package app

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// kubernetesTested is the kube-apiserver the tests run (test/cluster).
const kubernetesTested = "v1.37.1"

// version is set at build time with -ldflags -X; see the Makefile.
var version = ""

// Version returns shepherd's version: the linker-set one, else the module
// version Go recorded, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print shepherd's version and the upstream APIs it is tested with",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "shepherd %s (%s, %s/%s)\n"+
					"tested with: Kubeflow Trainer %s (%s), JobSet %s (%s), Grove %s, Kubernetes %s\n",
					Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
					pinned.TrainerVersion, pinned.TrainerModule, pinned.JobSetVersion, pinned.JobSetModule, pinned.GroveAPI, kubernetesTested)
				return err
			},
		}
	})
}
