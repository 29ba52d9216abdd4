package interop

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
)

// TestCorpusByCarrierUnderStrictAndWarn replays the admission corpus
// through the apiserver with the upstream CRDs, every object of each case
// (its object, old object and context) with its seed knobs in their carrier
// annotations, under Strict and under Warn field validation: the verdict,
// the 422's causes, the admission warnings, the audited rules and the
// defaults read back are the admission chain's on the upstream schemas
// (which test/corpus proves equal to the seed form's), the apiserver warns
// of no unknown field and prunes nothing shepherd's patch set
// (corpus.Replay). test/webhook replays the same cases by field on the
// seed-shaped CRDs. Where the upstream CRD's own validation rejects a
// request the chain denies too (JobSet's CEL on startupPolicy InOrder with
// dependsOn, TrainJob's activeDeadlineSeconds minimum) before shepherd's
// validating webhook, the rejection is accepted and logged; a request the
// chain allows must be admitted, but for the upstream divergences the
// corpus lists (corpus.UpstreamOptions). Cases whose objects have a field the upstream CRD lacks (no knob
// carries it: sent, it is rejected under Strict and dropped under Warn)
// exist only in the seed form and are skipped, logged.
func TestCorpusByCarrierUnderStrictAndWarn(t *testing.T) {
	upstreamSchemas, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	admit := corpus.AdmitWith(celrules.Config{Schemas: upstreamSchemas})
	corpus.ReplayAll(t, corpus.Suite{
		Form:    "by carrier",
		Cluster: env,
		Audit:   readAudit,
		Timeout: timeout,
		Options: func(c *corpus.Case, fieldValidation string) corpus.ReplayOptions {
			return corpus.UpstreamOptions(c, fieldValidation, admit)
		},
		Skip: func(c *corpus.Case) string {
			if fields := corpus.SeedOnly(c, upstreamSchemas); len(fields) > 0 {
				return fmt.Sprintf("has fields no upstream CRD has and no carrier carries (%v): seed form only, replayed by test/webhook", fields)
			}
			return ""
		},
	})
}

// readAudit reads serve's /audit (plain HTTP in this suite) records of
// namespace since a time.
func readAudit(_ *testing.T, since time.Time, namespace string) ([]corpus.AuditRecord, error) {
	q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	resp, err := http.Get("http://" + serve.Metrics + "/audit?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /audit: HTTP %d: %s", resp.StatusCode, body)
	}
	return corpus.AuditRecords(body)
}
