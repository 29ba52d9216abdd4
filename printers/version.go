package printers

import (
	"fmt"
	"io"
	"runtime"

	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// KubernetesTested is the kube-apiserver the tests run (test/cluster).
const KubernetesTested = "v1.37.1"

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

// NewVersionInfo is shepherd version's report for the given version of
// shepherd: this binary's Go and platform and the upstreams it is tested
// with (integrations/pinned).
func NewVersionInfo(version string) VersionInfo {
	return VersionInfo{
		Version:  version,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		TestedWith: TestedUpstreams{
			Trainer:    UpstreamModule{Version: pinned.TrainerVersion, Module: pinned.TrainerModule},
			JobSet:     UpstreamModule{Version: pinned.JobSetVersion, Module: pinned.JobSetModule},
			Grove:      pinned.GroveAPI,
			Kubernetes: KubernetesTested,
		},
	}
}

// Version writes v in format: json, yaml, or two lines of text.
func Version(out io.Writer, format string, v VersionInfo) error {
	switch format {
	case "json":
		return JSON(out, v)
	case "yaml":
		return YAML(out, v)
	}
	_, err := fmt.Fprintf(out, "shepherd %s (%s, %s)\n"+
		"tested with: Kubeflow Trainer %s (%s), JobSet %s (%s), Grove %s, Kubernetes %s\n",
		v.Version, v.Go, v.Platform,
		v.TestedWith.Trainer.Version, v.TestedWith.Trainer.Module, v.TestedWith.JobSet.Version, v.TestedWith.JobSet.Module, v.TestedWith.Grove, v.TestedWith.Kubernetes)
	return err
}
