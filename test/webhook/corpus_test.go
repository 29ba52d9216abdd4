package webhook

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
)

// TestCorpusThroughTheAPIServer replays the admission corpus as real
// creates and updates through the apiserver and shepherd's webhooks, each
// case's seed knobs set by field (these CRDs have them), under Strict field
// validation (kubectl's default) and under Warn (what controllers and SDKs
// send), and checks the answer is exactly the chain's (the same chain
// `shepherd check` runs): allowed or denied, the 422's causes, the
// admission warnings, the defaults in the object read back, the audited
// rules; the apiserver warns of no unknown field, and nothing the chain
// admitted is pruned (corpus.Replay). test/interop replays the same cases
// by carrier on the upstream CRDs. Cases that need a non-default server
// configuration or a cluster without the Workload API are covered by
// test/corpus's replay through the chain only.
func TestCorpusThroughTheAPIServer(t *testing.T) {
	corpus.ReplayAll(t, corpus.Suite{
		Form:      "by field",
		Cluster:   env,
		Namespace: func(t *testing.T) string { return namespace(t, nil) },
		Audit:     readAudit,
		Timeout:   timeout,
		Options: func(_ *corpus.Case, fieldValidation string) corpus.ReplayOptions {
			return corpus.ReplayOptions{
				Form:            corpus.SeedForm,
				FieldValidation: fieldValidation,
				Admit:           corpus.AdmitWith(seedcrds.Config(celrules.Config{})),
			}
		},
	})
}

// readAudit reads serve's /audit records of namespace since a time, with
// the audit reader's token.
func readAudit(t *testing.T, since time.Time, namespace string) ([]corpus.AuditRecord, error) {
	tok, _ := tokens(t)
	q := "since=" + since.UTC().Format(time.RFC3339Nano)
	if namespace != "" {
		q += "&namespace=" + namespace
	}
	code, body := getMetrics(t, "/audit?"+q, tok)
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /audit: HTTP %d: %s", code, body)
	}
	return corpus.AuditRecords(body)
}
