package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/background"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/leader"
	"github.com/shepherd-k8s/shepherd/reports"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// AuditViolationsPath serves the background audit's last pass (the leader
// replica's) on the metrics server, authenticated like /metrics.
const AuditViolationsPath = "/audit/violations"

// backgroundAuditOptions are the flags of the background audit of stored
// objects (package background).
type backgroundAuditOptions struct {
	interval time.Duration
	// reports and reportMaxResults: the OpenReports the audit writes.
	reports          bool
	reportMaxResults int
	cpuShare         float64
}

func (b *backgroundAuditOptions) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&b.interval, "audit-interval", 10*time.Minute,
		"How often the leader judges every stored TrainJob, runtime, JobSet, PodCliqueSet, PodClique and PodCliqueScalingGroup again against every active rule (the background audit, which also runs at start, when a WorkloadPolicy or the schemas change, and after objects change); "+
			"its findings go to each WorkloadPolicy's status (violations), the gauge shepherd_audit_violations and the /audit ring. 0 turns the background audit off.")
	fs.Float64Var(&b.cpuShare, "audit-cpu-share", background.DefaultCPUShare,
		"Most of its time a background audit pass spends judging objects (0 < share <= 1): it pauses between batches of objects for the rest, so that admission on the same CPUs is not delayed by it. 1 runs passes flat out.")
	fs.BoolVar(&b.reports, "audit-reports", true,
		"Also write the background audit's findings as OpenReports (openreports.io/v1alpha1): one Report per namespace and a ClusterReport, each named "+api.ReportName+", when the cluster serves those CRDs (shepherd never installs them; without them nothing is written).")
	fs.IntVar(&b.reportMaxResults, "audit-report-max-results", reports.DefaultMaxResults,
		"Most results one OpenReport holds; its summary still counts every violation and the annotation "+reports.AnnotationOmitted+" says how many were left out.")
}

// validate reports flags that cannot work, before serve reaches for the
// apiserver.
func (b *backgroundAuditOptions) validate() error {
	if s := b.cpuShare; !(s > 0 && s <= 1) {
		return fmt.Errorf("--audit-cpu-share=%v: want a share of the time above 0 and at most 1, e.g. 0.25", s)
	}
	return nil
}

// auditedKinds are the kinds of framework f the background audit judges:
// every kind shepherd's webhooks admit.
func auditedKinds(f integrations.Framework) []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(f.Kinds))
	for _, k := range f.Kinds {
		out = append(out, schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: k})
	}
	return out
}

// setupBackgroundAudit runs the background audit in every leadership term
// (after what already runs there) over the kinds of each framework once it
// is active, and serves its results. A no-op with --audit-interval=0.
func setupBackgroundAudit(mgr ctrl.Manager, o *Options, frameworks *integrations.Watcher, admission admissionChain, rec *audit.Recorder, terms *leader.Terms) error {
	if o.backgroundAudit.interval <= 0 {
		return nil
	}
	chain, ok := admission.(background.Chain)
	if !ok {
		return fmt.Errorf("the admission chain %T cannot run the background audit", admission)
	}
	opts := background.Options{
		Chain:    chain,
		Recorder: rec,
		Interval: o.backgroundAudit.interval,
		// The webhooks never apply there (deploy/webhook's namespaceSelector).
		ExcludedNamespaces: []string{api.SystemNamespace, o.certs.Namespace},
		Clock:              clock.RealClock{},
		CPUShare:           o.backgroundAudit.cpuShare,
	}
	if o.backgroundAudit.reports {
		// The main manager's client and uncached reader: the reports are
		// few, and an informer on every Report of the cluster (most of them
		// other engines') would cost more than the reads.
		opts.Reports = &reports.Writer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), MaxResults: o.backgroundAudit.reportMaxResults}
	}
	aud := background.New(opts)
	for _, f := range integrations.Frameworks {
		kinds := auditedKinds(f)
		frameworks.OnActivate(f.Name, func(context.Context) error {
			aud.Watch(kinds...)
			return nil
		})
	}
	terms.AddLeaderOnly(func(term manager.Manager) error {
		if err := term.Add(aud.Runnable(term)); err != nil {
			return fmt.Errorf("adding the background audit: %w", err)
		}
		return nil
	})
	if err := mgr.AddMetricsServerExtraHandler(AuditViolationsPath, aud); err != nil {
		return fmt.Errorf("serving %s: %w", AuditViolationsPath, err)
	}
	return nil
}
