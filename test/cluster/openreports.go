package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// InstallOpenReportsCRDs installs the OpenReports CRDs (openreports.io) of
// the module version go.mod pins, from the module itself, as an admin of a
// cluster would: shepherd never installs them.
func (c *Cluster) InstallOpenReportsCRDs() error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openreports/reports-api").Output()
	if err != nil {
		return fmt.Errorf("locating the openreports module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd")
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing the OpenReports CRDs: %w", err)
	}
	return nil
}
