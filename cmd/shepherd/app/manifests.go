package app

import (
	"context"
	"fmt"
	"time"

	"github.com/shepherd-k8s/shepherd/celrules"
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
		c, restCfg, err := offline.Connect(f.kubeconfig, 30*time.Second)
		if err != nil {
			return cfg, &ExitError{Code: 2, Err: fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)}
		}
		cfg.Schemas, _, err = offline.ServedSchemas(context.Background(), c, restCfg.Host)
		return cfg, err
	}
	if len(f.crds) == 0 {
		cfg.Schemas, err = celrules.PinnedSchemas()
		return cfg, err
	}
	if cfg.Schemas, err = offline.ReadSchemas(f.crds, f.maxInput.bytes(), "--crd "); err != nil {
		return cfg, usageError("--crd: %v", err)
	}
	return cfg, nil
}
