package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/printers"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// impactOptions are the flags of `shepherd audit --policy`: the dry run of
// policies that are not applied yet against the objects a cluster (or a
// directory of manifests) already holds.
type impactOptions struct {
	policies []string
	files    []string
	// includeBuiltin also reports what the built-in rules (and policies
	// in --policy's company) find, not only the given policies.
	includeBuiltin bool
	rules          ruleConfigFlags
}

// runImpact evaluates the policies of --policy, not applied yet, against
// the objects already stored (a kubeconfig's cluster, or -f's manifests)
// as the webhook would judge a create of each, and prints what each policy
// would deny, warn or audit. Exit 1 when any object would be denied, as
// check does; 2 on a usage or input error.
func runImpact(ctx context.Context, o *auditOptions, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.rule != "" || o.user != "" || o.since != "" || o.limit != 0 {
		return usageError("--rule, --user, --since and --limit filter the verdicts of a running server; with --policy, give -n to narrow the objects judged")
	}
	policies, excs, err := offline.ReadPolicies(o.impact.policies, nil, o.impact.rules.maxInput.bytes())
	if err != nil {
		return parseFailure(err)
	}
	if len(policies) == 0 && len(excs) == 0 {
		return usageError("--policy %s holds no WorkloadPolicy nor PolicyException", strings.Join(o.impact.policies, ", "))
	}

	var (
		cfg     celrules.Config
		objects []*unstructured.Unstructured
		source  string
		// Offline the Workload API is taken as served, as check does.
		workloadAPI = true
	)
	if len(o.impact.files) > 0 {
		if cfg, err = o.impact.rules.config(); err != nil {
			return err
		}
		ms, err := offline.ReadManifests(o.impact.files, nil, o.impact.rules.maxInput.bytes())
		if err != nil {
			return parseFailure(err)
		}
		for _, m := range ms {
			offline.DefaultNamespace(cfg.Schemas, m.Obj)
			// The manifests stand for stored objects: judge what the
			// apiserver would have kept of them.
			cfg.Schemas.Prune(m.Obj.GroupVersionKind(), m.Obj.Object)
			cfg.Schemas.DropNulls(m.Obj.GroupVersionKind(), m.Obj.Object)
			objects = append(objects, m.Obj)
		}
		source = strings.Join(o.impact.files, ", ")
	} else {
		if len(o.impact.rules.crds) > 0 {
			return usageError("--crd is for -f: against a cluster the rules are type-checked against the CRDs it serves")
		}
		if err := webhook.CheckRuleIDs("disable-rule", o.impact.rules.disabled); err != nil {
			return &ExitError{Code: 2, Err: err}
		}
		cfg.DisabledRules = o.impact.rules.disabled
		if objects, cfg.Schemas, source, workloadAPI, err = readCluster(ctx, o); err != nil {
			return err
		}
	}

	rep, err := offline.Impact(ctx, offline.ImpactInput{
		Config: cfg, Objects: objects, Policies: policies, Exceptions: excs,
		WorkloadAPI: workloadAPI, Namespace: o.namespace, IncludeBuiltin: o.impact.includeBuiltin,
		Source: source, Timeout: defaultCheckTimeout,
	})
	if err != nil {
		return err
	}

	switch o.output {
	case outputJSON:
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	case outputYAML:
		err = printers.YAML(out, rep)
	default:
		err = printers.Impact(out, rep)
	}
	if err != nil {
		return err
	}
	if rep.WouldDeny > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// readCluster reads the stored objects, schemas and Workload API of the
// kubeconfig's cluster (offline.ReadCluster).
func readCluster(ctx context.Context, o *auditOptions) (objs []*unstructured.Unstructured, schemas *celrules.Schemas, source string, workloadAPI bool, err error) {
	c, restCfg, err := offline.Connect(o.kubeconfig, o.timeout)
	if err != nil {
		return nil, nil, "", false, &ExitError{Code: 2, Err: fmt.Errorf("audit --policy reads the cluster of a kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config), or the manifests of -f: %w", err)}
	}
	st, err := offline.ReadCluster(ctx, c, restCfg, o.namespace)
	if err != nil {
		return nil, nil, "", false, err
	}
	return st.Objects, st.Schemas, restCfg.Host, st.WorkloadAPI, nil
}
