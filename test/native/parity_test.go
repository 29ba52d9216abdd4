package native

import (
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
)

// TestCorpusVerdictsAsWebhookMode: every validation case of the corpus
// (test/corpus/cases, the cases of a V-rule) gets the same verdict in the
// native mode — the exported policies and the narrowed webhooks on this
// apiserver — as in the webhook mode, whose verdict is the admission
// chain's (what shepherd's webhooks answer, test/interop proves on the same
// upstream CRDs). Same verdict: admitted or denied alike, a denial named
// by a rule the chain denies with (the policy's rule, or the webhook's
// violation), and an admitted request warned by the same Warn rules. Cases
// are replayed as test/interop replays them (corpus.UpstreamOptions:
// carrier form, upstream CRDs, the same divergences); a request the
// upstream CRD's own validation rejects (before any validating admission)
// must be one the chain denies too. Strict field validation only:
// test/interop covers Warn, which the admission mode does not change.
func TestCorpusVerdictsAsWebhookMode(t *testing.T) {
	schemas, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	waitForPolicies(t, env.Namespace(t))
	admit := corpus.AdmitWith(celrules.Config{})
	native := &corpus.NativeMode{DeniedBy: deniedBy, WarnedBy: corpus.PolicyWarnedBy}
	corpus.ReplayAll(t, corpus.Suite{
		Form:             "by carrier, native mode",
		Cluster:          env,
		Timeout:          timeout,
		FieldValidations: []string{metav1.FieldValidationStrict},
		Options: func(c *corpus.Case, fieldValidation string) corpus.ReplayOptions {
			o := corpus.UpstreamOptions(c, fieldValidation, admit)
			o.Native = native
			return o
		},
		Skip: func(c *corpus.Case) string {
			if !strings.HasPrefix(c.Rule, "V-") {
				return "a default: test/vap's MAP parity"
			}
			if fields := corpus.SeedOnly(c, schemas); len(fields) > 0 {
				return "fields the upstream CRDs lack: seed form only (test/webhook)"
			}
			return ""
		},
	})
}

// webhookDenial names the narrowed webhook of a webhook denial.
var webhookDenial = regexp.MustCompile(`admission webhook "([^"]+)" denied`)

// webhookRules is the rule each narrowed webhook runs (deploy/native): the
// webhook's 422 names its webhook, not its rule.
var webhookRules = map[string]string{
	"default.shepherd.dev":            "D-WL-1",
	"runtimes.validate.shepherd.dev":  "V-TR-7",
	"grove.validate.shepherd.dev":     "V-PCLQ-1",
	"trainjobs.validate.shepherd.dev": "V-TJ-3", // CREATE; V-TJ-4 on UPDATE
}

// deniedBy is the rule a native-mode denial comes from: the exported
// policy's, or the narrowed webhook's.
func deniedBy(err error, operation string) string {
	if rule := corpus.PolicyDeniedBy(err); rule != "" {
		return rule
	}
	if m := webhookDenial.FindStringSubmatch(err.Error()); m != nil {
		if m[1] == "trainjobs.validate.shepherd.dev" && operation == "UPDATE" {
			return "V-TJ-4"
		}
		return webhookRules[m[1]]
	}
	return ""
}
