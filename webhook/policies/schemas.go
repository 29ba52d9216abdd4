package policies

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

// SchemaSink is what type-checks rules: the admission chain. SetSchemas
// compiles every rule again against the given schemas, Schemas returns
// the ones in use; InactiveRules lists the built-in rules that do not
// type-check against them.
type SchemaSink interface {
	SetSchemas(s *celrules.Schemas) error
	Schemas() *celrules.Schemas
	InactiveRules() map[string]string
}

// ServedSchemasSource names the schemas read from the cluster's CRDs.
const ServedSchemasSource = "the CRDs the cluster serves"

var builtinInactive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "shepherd_builtin_rule_inactive",
	Help: "1 for each built-in rule that is not enforced although enabled: the schemas the cluster serves lack its fields, or the served CRD or an upstream webhook already enforces all of it (--defer-to-upstream). /status and shepherd export rules say why.",
}, []string{"rule"})

func init() {
	metrics.Registry.MustRegister(builtinInactive)
}

// ApplySchemas makes the chain type-check against crds, the CRDs the
// cluster serves now (called at start and whenever one is installed,
// upgraded or removed): built-in rules whose fields are missing are
// switched off and logged, and every WorkloadPolicy is compiled again and
// its status rewritten, so a policy on a field the cluster lacks reports a
// compile error and one on a field that just appeared starts being
// enforced.
func (r *Reconciler) ApplySchemas(ctx context.Context, sink SchemaSink, crds []*apiextensionsv1.CustomResourceDefinition) (*celrules.Schemas, error) {
	log := ctrl.LoggerFrom(ctx).WithName("schemas")
	before := sink.InactiveRules()
	// serve starts the chain on the CRDs it read itself, usually the ones
	// of this first pass: the rules are then compiled against them already.
	s := sink.Schemas()
	if !s.Of(crds) || s.Source != ServedSchemasSource {
		var err error
		if s, err = celrules.NewSchemas(crds, ServedSchemasSource); err != nil {
			return nil, fmt.Errorf("reading the schemas of the cluster's CRDs: %w", err)
		}
		if err := sink.SetSchemas(s); err != nil {
			return nil, fmt.Errorf("type-checking the rules against the cluster's CRDs: %w", err)
		}
	}
	after := sink.InactiveRules()
	ReportInactive(ctx, before, after, !r.schemasApplied.Load())
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.Name)
	}
	log.V(1).Info("rules type-checked against the cluster's CRDs", "crds", names, "inactiveBuiltins", len(after))
	r.schemasApplied.Store(true)
	return s, r.recheckAll(ctx)
}

// ReportInactive logs the built-in rules that became inactive or active
// again between before and after (every inactive one when all) and
// exports shepherd_builtin_rule_inactive for after.
func ReportInactive(ctx context.Context, before, after map[string]string, all bool) {
	log := ctrl.LoggerFrom(ctx).WithName("rules")
	for _, id := range slices.Sorted(maps.Keys(after)) {
		if before[id] != after[id] || all {
			log.Info("built-in rule inactive", "rule", id, "reason", after[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		if _, still := after[id]; !still {
			log.Info("built-in rule active again", "rule", id, "was", before[id])
		}
	}
	builtinInactive.Reset()
	for id := range after {
		builtinInactive.WithLabelValues(id).Set(1)
	}
}

// recheckAll forgets which generations were compiled and queues every
// WorkloadPolicy, so each gets its outcome against the new schemas written
// to its status.
func (r *Reconciler) recheckAll(ctx context.Context) error {
	list := &shepherdv1alpha1.WorkloadPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return fmt.Errorf("listing WorkloadPolicies to check them again: %w", err)
	}
	r.mu.Lock()
	r.applied = map[string]applied{}
	r.compiled = 0
	r.mu.Unlock()
	if r.recheck == nil {
		return nil
	}
	go func() {
		for i := range list.Items {
			select {
			case r.recheck <- event.GenericEvent{Object: &list.Items[i]}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// SchemasReadyChecker is ready once the rules have been type-checked
// against the cluster's own schemas; before that they are checked against
// the pinned upstream ones, which may differ from what this cluster runs.
func (r *Reconciler) SchemasReadyChecker(*http.Request) error {
	if !r.schemasApplied.Load() {
		return fmt.Errorf("rules not yet type-checked against the cluster's CRDs")
	}
	return nil
}
