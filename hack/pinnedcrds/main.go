// Command pinnedcrds copies the CRDs of the upstream projects go.mod pins
// (Kubeflow Trainer, JobSet) from the Go module cache into
// integrations/pinned/crds, where the binary embeds them. The module
// versions come from go.mod alone, so a version bump there is the only
// change needed; the copies are ignored by git.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// module is an upstream Go module and the directory of its published CRDs.
type module struct {
	path   string
	crdDir string
	prefix string // file name prefix of the CRDs taken
}

var modules = []module{
	{path: "github.com/kubeflow/trainer/v2", crdDir: "manifests/base/crds", prefix: "trainer.kubeflow.org_"},
	{path: "sigs.k8s.io/jobset", crdDir: "config/components/crd/bases", prefix: "jobset.x-k8s.io_"},
}

func main() {
	out := filepath.Join("integrations", "pinned", "crds")
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := run(out); err != nil {
		fmt.Fprintln(os.Stderr, "pinnedcrds:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	for _, m := range modules {
		dir, version, err := download(m.path)
		if err != nil {
			return err
		}
		files, err := filepath.Glob(filepath.Join(dir, m.crdDir, m.prefix+"*.yaml"))
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("%s@%s has no %s*.yaml in %s", m.path, version, m.prefix, m.crdDir)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			dst := filepath.Join(out, filepath.Base(f))
			if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
				continue
			}
			// The module cache is read-only; the copy must be writable so a
			// later version can replace it.
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// download resolves a module at the version go.mod requires and returns its
// directory in the module cache, downloading it through the proxy if needed.
func download(path string) (dir, version string, err error) {
	cmd := exec.Command("go", "mod", "download", "-json", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	var info struct{ Dir, Version, Error string }
	if jerr := json.Unmarshal(b, &info); jerr == nil && info.Error != "" {
		return "", "", fmt.Errorf("go mod download %s: %s", path, info.Error)
	}
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	if info.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: no directory in %s", path, b)
	}
	return info.Dir, info.Version, nil
}
