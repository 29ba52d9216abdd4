package background

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/reports"
)

// ReportSink receives the findings of every pass whose results changed
// (and of every periodic pass): package reports' Writer, which keeps the
// OpenReports of the cluster equal to them.
type ReportSink interface {
	Sync(ctx context.Context, findings []reports.Finding) (reports.Counts, error)
}

// firstSeen remembers when each current violation was first found, so a
// report's results keep their timestamps from pass to pass (an unchanged
// finding is an unchanged report, never rewritten).
type firstSeen map[string]time.Time

// stamp records when each of res's violations was first found and
// forgets those no longer found. Every completed pass stamps, also one
// whose reports are not written (the rules changed under it): its results
// are what /audit shows, and the report written after the next pass says
// the same time.
func (f firstSeen) stamp(res *Results) {
	seen := map[string]bool{}
	for _, objs := range res.Namespaces {
		for _, o := range objs {
			for _, fd := range o.Findings {
				key := findingKey(o, fd)
				seen[key] = true
				if _, ok := f[key]; !ok {
					f[key] = res.Time
				}
			}
		}
	}
	for k := range f {
		if !seen[k] {
			delete(f, k)
		}
	}
}

// reportFindings flattens res (stamped) into the reports' findings, each
// with when it was first found.
func (f firstSeen) reportFindings(res *Results) []reports.Finding {
	var out []reports.Finding
	for _, objs := range res.Namespaces {
		for _, o := range objs {
			for _, fd := range o.Findings {
				t, ok := f[findingKey(o, fd)]
				if !ok {
					t = res.Time
				}
				out = append(out, reports.Finding{
					APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID,
					Rule: fd.Rule, Action: fd.Action, Field: fd.Field, Message: fd.Message, Found: t,
				})
			}
		}
	}
	return out
}

// findingKey identifies one violation of one object across passes.
func findingKey(o ObjectResult, fd Finding) string {
	return string(o.UID) + "\x00" + fd.Rule + "\x00" + fd.Field + "\x00" + fd.Message
}

// syncReports hands the pass's findings to the report sink. A failure is
// logged and retried with the next pass: the reports are a copy of what
// the policy status and /audit already hold.
func (t *term) syncReports(ctx context.Context, res *Results) {
	a := t.a
	if a.opts.Reports == nil {
		return
	}
	c, err := a.opts.Reports.Sync(ctx, a.seen.reportFindings(res))
	log := ctrl.LoggerFrom(ctx)
	if err != nil {
		log.Error(err, "writing the audit's OpenReports; trying again after the next pass")
		return
	}
	if c.Created+c.Updated+c.Deleted > 0 {
		log.Info("OpenReports written", "created", c.Created, "updated", c.Updated, "deleted", c.Deleted, "unchanged", c.Unchanged)
	}
}
