package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
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
	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	// Each case runs in namespaces of its own with a client (its
	// warnings) of its own, beside the others.
	replayEnv := func(t *testing.T) corpus.ReplayEnv {
		k, w := env.WarningsClient(t)
		return corpus.ReplayEnv{
			Client:       k,
			TakeWarnings: w.Take,
			Namespace:    func(t *testing.T) string { return namespace(t, nil) },
			Audit:        readAudit,
			Timeout:      timeout,
		}
	}
	for _, mode := range []string{metav1.FieldValidationStrict, metav1.FieldValidationWarn} {
		t.Run(mode, func(t *testing.T) {
			ran := 0
			for i := range cases {
				c := &cases[i]
				if !reflect.DeepEqual(c.Config, celrules.Config{}) || c.NoWorkloadAPI {
					t.Logf("%s: needs its own server configuration; covered by test/corpus", c.Name)
					continue
				}
				ran++
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					corpus.Replay(t, replayEnv(t), c, corpus.ReplayOptions{
						Form:            corpus.SeedForm,
						FieldValidation: mode,
						Admit:           admitWith(seedcrds.Config(celrules.Config{})),
					})
				})
			}
			if ran == 0 {
				t.Fatal("no corpus case ran")
			}
			t.Logf("%d of %d corpus cases replayed through the apiserver by field under %s field validation", ran, len(cases), mode)
		})
	}
}

// admitWith is the admission chain with rules, its lookups seeing the
// request's context objects, as a corpus.AdmitFunc.
func admitWith(rules celrules.Config) corpus.AdmitFunc {
	return func(t testing.TB, r corpus.ChainRequest) *corpus.Verdict {
		t.Helper()
		objs := make([]runtime.Object, 0, len(r.Context))
		for _, o := range r.Context {
			objs = append(objs, o)
		}
		chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, true), Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.Object.GroupVersionKind()
		req := &webhook.Request{
			Operation: admissionv1.Operation(r.Operation),
			Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			Namespace: r.Object.GetNamespace(), Name: r.Object.GetName(),
			Object: mustJSON(t, r.Object.Object),
		}
		if r.OldObject != nil {
			req.OldObject = mustJSON(t, r.OldObject.Object)
		}
		v := chain.Admit(context.Background(), req)
		out := &corpus.Verdict{Allowed: v.Allowed, Warnings: v.Warnings, Object: v.Object,
			Causes: server.InvalidStatus(req, v.Violations).Details.Causes}
		for _, op := range v.Patch {
			out.Patch = append(out.Patch, corpus.PatchOp{Operation: op.Operation, Path: op.Path})
		}
		for _, viol := range v.Violations {
			out.Audited = append(out.Audited, viol.Rule+"/"+string(viol.Action))
		}
		return out
	}
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
	var l audit.List
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	out := make([]corpus.AuditRecord, 0, len(l.Items))
	for _, r := range l.Items {
		out = append(out, corpus.AuditRecord{Kind: r.Kind, Name: r.Name, Operation: r.Operation, Rule: r.Rule, Action: r.Action, DryRun: r.DryRun})
	}
	return out, nil
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
