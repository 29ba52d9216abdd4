package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// ruleConfigFlags are the flags that switch rules, shared by check and
// export.
type ruleConfigFlags struct {
	disabled []string
	crds     []string
	// kubeconfig (export only): type-check against the CRDs the cluster
	// of this kubeconfig serves instead.
	kubeconfig string
	// maxInput is --max-input-bytes, which every command with these
	// flags has: it bounds the --crd files here, and each file or stream
	// of manifests the command reads.
	maxInput inputLimit
}

// crdFlagUsage is --crd's help, shared by check and export.
// crdFlagUsage's backquoted word is the flag's value name in --help (pflag
// reads the first backquoted word so); the usage must quote nothing else.
const crdFlagUsage = "`PATH` of a CRD file or directory of the target cluster to type-check rules against (repeatable); default: the pinned upstream CRDs built in, which shepherd version names. Built-in rules whose fields these schemas lack are inactive; policies on such fields do not compile"

// config resolves the flags: the disabled rules and the schemas of --crd
// (the pinned upstream ones when none is given). A --crd file larger than
// --max-input-bytes is refused.
func (f *ruleConfigFlags) config() (celrules.Config, error) {
	cfg := celrules.Config{DisabledRules: f.disabled}
	if err := webhook.CheckRuleIDs("disable-rule", f.disabled); err != nil {
		return cfg, &ExitError{Code: 2, Err: err}
	}
	var err error
	if f.kubeconfig != "" {
		if len(f.crds) > 0 {
			return cfg, usageError("give --crd or --kubeconfig, not both: both name the schemas to type-check against")
		}
		c, restCfg, err := clusterClient(f.kubeconfig, 30*time.Second)
		if err != nil {
			return cfg, &ExitError{Code: 2, Err: fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)}
		}
		cfg.Schemas, _, err = servedSchemas(context.Background(), c, restCfg.Host)
		return cfg, err
	}
	if len(f.crds) == 0 {
		cfg.Schemas, err = celrules.PinnedSchemas()
		return cfg, err
	}
	for _, p := range f.crds {
		if err := checkCRDFileSizes(p, f.maxInput.bytes()); err != nil {
			return cfg, usageError("--crd: %v", err)
		}
	}
	crds, err := pinned.Read(f.crds...)
	if err != nil {
		return cfg, usageError("--crd: %v", err)
	}
	cfg.Schemas, err = celrules.NewSchemas(crds, "--crd "+strings.Join(f.crds, ", "))
	return cfg, err
}

// checkCRDFileSizes refuses, by its size, a regular file larger than limit
// among those pinned.Read reads for path (the file, or a directory's
// *.yaml, *.yml and *.json, not recursively): pinned.Read reads each
// whole, unbounded. A CRD streamed from a pipe (--crd <(kubectl get crd
// ... -o yaml)) has no size to check and is read as before.
func checkCRDFileSizes(path string, limit int64) error {
	info, err := os.Stat(path)
	if err != nil {
		return nil // pinned.Read says what is wrong with it
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil
		}
		files = files[:0]
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
				files = append(files, filepath.Join(path, name))
			}
		}
	}
	for _, f := range files {
		if _, err := offline.CheckFileSize(f, limit); err != nil {
			var tooLarge *offline.InputTooLargeError
			if errors.As(err, &tooLarge) {
				return err
			}
		}
	}
	return nil
}
