package corpus

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// Suite is one replay of the corpus through an apiserver in one admission
// mode (shepherd's webhooks, the native mode, the exported policies alone:
// ReplayOptions.Native): the CRD shape the cluster serves decides the form
// the knobs travel in (ReplayOptions.Form) and the chain the verdicts are
// compared with.
type Suite struct {
	// Form names the replay in the log: "by field", "by carrier".
	Form string
	// Cluster is the control plane the cases are sent to; each case gets a
	// client of its own (Cluster.WarningsClient: its own warnings), so that
	// the cases run side by side.
	Cluster *cluster.Cluster
	// Namespace creates a namespace for a case (Cluster.Namespace when
	// nil).
	Namespace func(t *testing.T) string
	// Audit reads serve's /audit (ReplayEnv.Audit).
	Audit func(t *testing.T, since time.Time, namespace string) ([]AuditRecord, error)
	// Timeout bounds each wait.
	Timeout time.Duration
	// Options are the replay options of case c under fieldValidation.
	Options func(c *Case, fieldValidation string) ReplayOptions
	// Skip, when set and it returns a reason, leaves c out (logged).
	Skip func(c *Case) string
	// FieldValidations are the field validations each case is replayed
	// under: Strict (kubectl's default) and Warn (what controllers and
	// SDKs send) when empty.
	FieldValidations []string
}

// ReplayAll replays every case of the corpus that runs on serve's default
// configuration (a case with a configuration of its own, or one for a
// cluster without the Workload API, is test/corpus's alone, through the
// chain) under each of s.FieldValidations, the cases of each in parallel.
func ReplayAll(t *testing.T, s Suite) {
	cases, err := Load(Dir())
	if err != nil {
		t.Fatal(err)
	}
	modes := s.FieldValidations
	if len(modes) == 0 {
		modes = []string{metav1.FieldValidationStrict, metav1.FieldValidationWarn}
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ran := 0
			for i := range cases {
				c := &cases[i]
				if !reflect.DeepEqual(c.Config, celrules.Config{}) || c.NoWorkloadAPI {
					t.Logf("%s: needs its own server configuration; covered by test/corpus", c.Name)
					continue
				}
				if s.Skip != nil {
					if why := s.Skip(c); why != "" {
						t.Logf("%s: %s", c.Name, why)
						continue
					}
				}
				ran++
				t.Run(c.Name, func(t *testing.T) {
					t.Parallel()
					k, w := s.Cluster.WarningsClient(t)
					env := ReplayEnv{Client: k, TakeWarnings: w.Take, Namespace: s.Namespace, Audit: s.Audit, Timeout: s.Timeout}
					if env.Namespace == nil {
						env.Namespace = func(t *testing.T) string { return s.Cluster.Namespace(t) }
					}
					Replay(t, env, c, s.Options(c, mode))
				})
			}
			if ran == 0 {
				t.Fatal("no corpus case ran")
			}
			t.Logf("%d of %d corpus cases replayed through the apiserver %s under %s field validation", ran, len(cases), s.Form, mode)
		})
	}
}

// AdmitWith is the admission chain with rules, its lookups seeing the
// request's context objects, as an AdmitFunc: the verdict `shepherd check`
// gives.
func AdmitWith(rules celrules.Config) AdmitFunc {
	return func(t testing.TB, r ChainRequest) *Verdict {
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
		}
		if req.Object, err = json.Marshal(r.Object.Object); err != nil {
			t.Fatal(err)
		}
		if r.OldObject != nil {
			if req.OldObject, err = json.Marshal(r.OldObject.Object); err != nil {
				t.Fatal(err)
			}
		}
		v := chain.Admit(context.Background(), req)
		out := &Verdict{Allowed: v.Allowed, Warnings: v.Warnings, Object: v.Object,
			Causes: server.InvalidStatus(req, v.Violations).Details.Causes}
		for _, op := range v.Patch {
			out.Patch = append(out.Patch, PatchOp{Operation: op.Operation, Path: op.Path})
		}
		for _, viol := range v.Violations {
			out.Audited = append(out.Audited, viol.Rule+"/"+string(viol.Action))
		}
		return out
	}
}

// AuditRecords decodes the body of serve's /audit into the records the
// replay compares.
func AuditRecords(body []byte) ([]AuditRecord, error) {
	var l audit.List
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	out := make([]AuditRecord, 0, len(l.Items))
	for _, r := range l.Items {
		out = append(out, AuditRecord{Kind: r.Kind, Name: r.Name, Operation: r.Operation, Rule: r.Rule, Action: r.Action, DryRun: r.DryRun})
	}
	return out, nil
}
