package app

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

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

// VersionInfo is `shepherd version -o json|yaml`.
type VersionInfo struct {
	Version    string          `json:"version"`
	Go         string          `json:"go"`
	Platform   string          `json:"platform"`
	TestedWith TestedUpstreams `json:"testedWith"`
}

// TestedUpstreams are the upstream APIs shepherd is tested with.
type TestedUpstreams struct {
	Trainer    UpstreamModule `json:"trainer"`
	JobSet     UpstreamModule `json:"jobset"`
	Grove      string         `json:"grove"`
	Kubernetes string         `json:"kubernetes"`
}

// UpstreamModule is an upstream project's version and Go module.
type UpstreamModule struct {
	Version string `json:"version"`
	Module  string `json:"module"`
}

func versionInfo() VersionInfo {
	return VersionInfo{
		Version:  Version(),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		TestedWith: TestedUpstreams{
			Trainer:    UpstreamModule{Version: pinned.TrainerVersion, Module: pinned.TrainerModule},
			JobSet:     UpstreamModule{Version: pinned.JobSetVersion, Module: pinned.JobSetModule},
			Grove:      pinned.GroveAPI,
			Kubernetes: kubernetesTested,
		},
	}
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
				v := versionInfo()
				out := cmd.OutOrStdout()
				switch output {
				case outputJSON:
					b, err := json.MarshalIndent(v, "", "  ")
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(out, "%s\n", b)
					return err
				case outputYAML:
					b, err := yaml.Marshal(v)
					if err != nil {
						return err
					}
					_, err = out.Write(b)
					return err
				}
				_, err := fmt.Fprintf(out, "shepherd %s (%s, %s)\n"+
					"tested with: Kubeflow Trainer %s (%s), JobSet %s (%s), Grove %s, Kubernetes %s\n",
					v.Version, v.Go, v.Platform,
					v.TestedWith.Trainer.Version, v.TestedWith.Trainer.Module, v.TestedWith.JobSet.Version, v.TestedWith.JobSet.Module, v.TestedWith.Grove, v.TestedWith.Kubernetes)
				return err
			},
		}
		reportOutputs.addOutputFlag(cmd, &output)
		return cmd
	})
}
