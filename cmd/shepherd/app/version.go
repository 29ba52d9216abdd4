package app

import (
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/shepherd-k8s/shepherd/printers"
)

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
		var output string
		cmd := &cobra.Command{
			Use:   "version [-o " + reportOutputs.choices() + "]",
			Short: "Print shepherd's version and the upstream APIs it is tested with",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := reportOutputs.resolve(&output, cmd.ErrOrStderr()); err != nil {
					return err
				}
				return printers.Version(cmd.OutOrStdout(), output, printers.NewVersionInfo(Version()))
			},
		}
		reportOutputs.addOutputFlag(cmd, &output)
		return cmd
	})
}
