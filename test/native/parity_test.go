package native

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// TestCorpusVerdictsAsWebhookMode: every validation case of the corpus
// (test/corpus/cases, the cases of a V-rule) gets the same verdict in the
// native mode — the exported policies and the narrowed webhook on this
// apiserver — as in the webhook mode, whose verdict is the admission
// chain's (webhook.Chain.Admit with the case's context as lookups: what
// shepherd's webhooks answer, test/interop proves on the same upstream
// CRDs). Same verdict: admitted or denied alike, a denial named by a rule
// the chain denies with (the policy's rule, or the webhook's
// violation), and an admitted request warned by the same Warn rules.
// Cases are replayed as test/interop replays them (carrier form, upstream
// CRDs); a request the upstream CRD's own validation rejects (before any
// validating admission) must be one the chain denies too.
func TestCorpusVerdictsAsWebhookMode(t *testing.T) {
	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	waitForPolicies(t, env.Namespace(t))
	ran := 0
	var denied, byCRD atomic.Int32
	// The cases run side by side, each with its objects and a client (its
	// warnings) of its own; the group returns once all have.
	t.Run("cases", func(t *testing.T) {
		for i := range cases {
			c := &cases[i]
			if !strings.HasPrefix(c.Rule, "V-") {
				continue // defaulting: test/vap's MAP parity
			}
			if !reflect.DeepEqual(c.Config, celrules.Config{}) || c.NoWorkloadAPI {
				continue // another server configuration than deploy/native's
			}
			if seedOnly(c, schemas) {
				continue // fields the upstream CRDs lack: seed form only (test/webhook)
			}
			ran++
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				k, warned := env.WarningsClient(t)
				switch replay(t, k, warned, c, schemas) {
				case verdictDenied:
					denied.Add(1)
				case verdictCRD:
					byCRD.Add(1)
				}
			})
		}
	})
	if ran < 40 {
		t.Fatalf("only %d validation cases replayed", ran)
	}
	t.Logf("%d validation cases: the same verdict in native mode as in webhook mode (%d denied, %d of them by the upstream CRD's own validation first)", ran, denied.Load()+byCRD.Load(), byCRD.Load())
}

const (
	verdictAllowed = iota
	verdictDenied
	verdictCRD
)

var (
	replaySeq atomic.Int64
	// policyDenial names the policy of a ValidatingAdmissionPolicy denial.
	policyDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)' with binding`)
	// policyWarning names the policy of a ValidatingAdmissionPolicy warning.
	policyWarning = regexp.MustCompile(`^Validation failed for ValidatingAdmissionPolicy '([^']+)'`)
	// webhookDenial names the narrowed webhook of a webhook denial.
	webhookDenial = regexp.MustCompile(`admission webhook "([^"]+)" denied`)
)

// webhookRules is the rule each narrowed webhook runs (deploy/native): the
// webhook's 422 names its webhook, not its rule.
var webhookRules = map[string]string{
	"default.shepherd.dev":            "D-WL-1",
	"runtimes.validate.shepherd.dev":  "V-TR-7",
	"grove.validate.shepherd.dev":     "V-PCLQ-1",
	"trainjobs.validate.shepherd.dev": "V-TJ-3", // CREATE; V-TJ-4 on UPDATE
}

func replay(t *testing.T, k client.Client, warned *cluster.Warnings, c *corpus.Case, schemas *celrules.Schemas) int {
	ctx := context.Background()
	prep := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		if u == nil {
			return nil
		}
		return corpus.UpstreamRequired(corpus.ToCarriers(u))
	}
	obj, old := prep(c.Object), prep(c.OldObject)
	var contexts []*unstructured.Unstructured
	for _, o := range c.Context {
		contexts = append(contexts, prep(o))
	}
	if rt := corpus.RuntimeForOldTrainJob(old, contexts); rt != nil {
		contexts = append(contexts, rt)
	}
	order := map[string]int{"ClusterTrainingRuntime": 0, "TrainingRuntime": 1, "PodCliqueSet": 2, "TrainJob": 3}
	sort.SliceStable(contexts, func(i, j int) bool { return order[contexts[i].GetKind()] < order[contexts[j].GetKind()] })

	suffix := "-n" + strconv.FormatInt(replaySeq.Add(1), 10)
	namespaces := map[string]string{}
	place := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		if u == nil {
			return nil
		}
		u = u.DeepCopy()
		namespaced, err := k.IsObjectNamespaced(u)
		if err != nil {
			t.Fatalf("%s: %v", u.GetKind(), err)
		}
		if namespaced {
			if namespaces[u.GetNamespace()] == "" {
				namespaces[u.GetNamespace()] = env.Namespace(t)
			}
			u.SetNamespace(namespaces[u.GetNamespace()])
		} else {
			u.SetName(u.GetName() + suffix)
			t.Cleanup(func() { _ = k.Delete(ctx, u.DeepCopy()) })
		}
		if u.GetKind() == "TrainJob" {
			name, _, _ := unstructured.NestedString(u.Object, "spec", "runtimeRef", "name")
			kind, _, _ := unstructured.NestedString(u.Object, "spec", "runtimeRef", "kind")
			if name != "" && (kind == "" || kind == "ClusterTrainingRuntime") {
				_ = unstructured.SetNestedField(u.Object, name+suffix, "spec", "runtimeRef", "name")
			}
		}
		return u
	}
	// create stores what the request needs, retrying while shepherd's
	// webhook has not yet seen what it refers to (its informer cache).
	create := func(o *unstructured.Unstructured) {
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			err = k.Create(ctx, o)
			return err == nil || !strings.Contains(err.Error(), "admission webhook"), nil
		})
		if err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	var placed []*unstructured.Unstructured
	for _, o := range contexts {
		o = place(o)
		placed = append(placed, o.DeepCopy())
		create(o)
	}
	obj, old = place(obj), place(old)

	want := admit(t, c.OperationOrDefault(), obj, old, placed)
	if want.Allowed != c.WantAllowed {
		t.Fatalf("the chain allowed=%v, the corpus wants %v", want.Allowed, c.WantAllowed)
	}
	if old != nil {
		stored := old.DeepCopy()
		create(stored)
		obj.SetResourceVersion(stored.GetResourceVersion())
		obj.SetUID(stored.GetUID())
	}
	send := func() error {
		o := obj.DeepCopy()
		if old != nil {
			return k.Update(ctx, o, client.DryRunAll)
		}
		return k.Create(ctx, o, client.DryRunAll)
	}
	// The webhook's lookups read its cache: retry until it has seen the
	// context (or the CRD rejects the request, which no cache changes).
	var err error
	warned.Take()
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		warned.Take()
		err = send()
		return (err == nil) == want.Allowed || rejectedByCRD(err), nil
	})
	warnings := warned.Take()

	denyRules := map[string]bool{}
	var warnRules []string
	for _, v := range want.Violations {
		switch v.Action {
		case webhook.ActionDeny:
			denyRules[v.Rule] = true
		case webhook.ActionWarn:
			warnRules = append(warnRules, v.Rule)
		}
	}
	switch {
	case err == nil && want.Allowed:
		// Admitted alike, warned by the same rules (the webhook mode's
		// defaulter notices, D-JS-2's, have no policy twin).
		var got []string
		for _, w := range warnings {
			if m := policyWarning.FindStringSubmatch(w); m != nil {
				got = append(got, ruleOf(m[1]))
			}
		}
		sort.Strings(got)
		sort.Strings(warnRules)
		if !slices.Equal(slices.Compact(got), slices.Compact(warnRules)) {
			t.Errorf("warned by %v in native mode, by %v in webhook mode (warnings %q)", got, warnRules, warnings)
		}
		return verdictAllowed
	case err != nil && !want.Allowed:
		if rejectedByCRD(err) {
			t.Logf("rejected by the upstream CRD's own validation before validating admission; the chain denies it too (%v): %v", keys(denyRules), err)
			return verdictCRD
		}
		rule := deniedBy(err, c.OperationOrDefault())
		if !denyRules[rule] {
			t.Errorf("denied by %q in native mode; webhook mode denies with %v: %v", rule, keys(denyRules), err)
		}
		return verdictDenied
	case err != nil && rejectedByCRD(err) && crdRejects[c.Name] != "" && strings.Contains(err.Error(), crdRejects[c.Name]):
		// The CRD rejects it in either mode: its validation runs before
		// any validating admission.
		t.Logf("the chain allows it; the upstream CRD's own validation rejects it, in either mode: %v", err)
		return verdictCRD
	default:
		t.Errorf("native mode allowed=%v (%v); webhook mode allowed=%v %v", err == nil, err, want.Allowed, want.Violations)
		return verdictAllowed
	}
}

// crdRejects are the cases the chain allows and the upstream CRDs' own
// validation rejects (test/interop's knownDivergences): the apiserver
// rejects them before validating admission, in the webhook mode as in the
// native mode.
var crdRejects = map[string]string{
	// Trainer v2.3.0's CRD makes spec.trainer immutable whatever the
	// runtime; V-TJ-4 lets numNodes change without a Workload runtime.
	"tj-numnodes-change-without-workload": "spec.trainer: Invalid value: field is immutable",
}

// deniedBy is the rule a native-mode denial comes from: the exported
// policy's, or the narrowed webhook's.
func deniedBy(err error, operation string) string {
	if m := policyDenial.FindStringSubmatch(err.Error()); m != nil {
		return ruleOf(m[1])
	}
	if m := webhookDenial.FindStringSubmatch(err.Error()); m != nil {
		if m[1] == "trainjobs.validate.shepherd.dev" && operation == "UPDATE" {
			return "V-TJ-4"
		}
		return webhookRules[m[1]]
	}
	return ""
}

// ruleOf maps an exported policy's name back to its rule ID
// (shepherd-v-tj-1 -> V-TJ-1).
func ruleOf(policy string) string {
	return strings.ToUpper(strings.TrimPrefix(policy, "shepherd-"))
}

func rejectedByCRD(err error) bool {
	return err != nil && apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "admission webhook") &&
		!strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// admit is the webhook mode's verdict: the chain, its lookups the context.
func admit(t *testing.T, op string, obj, old *unstructured.Unstructured, contexts []*unstructured.Unstructured) *webhook.Verdict {
	t.Helper()
	objs := make([]runtime.Object, 0, len(contexts))
	for _, o := range contexts {
		objs = append(objs, o)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(objs, true)})
	if err != nil {
		t.Fatal(err)
	}
	gvk := obj.GroupVersionKind()
	req := &webhook.Request{Operation: admissionv1.Operation(op),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if req.Object, err = json.Marshal(obj.Object); err != nil {
		t.Fatal(err)
	}
	if old != nil {
		if req.OldObject, err = json.Marshal(old.Object); err != nil {
			t.Fatal(err)
		}
	}
	return chain.Admit(context.Background(), req)
}

// seedOnly reports whether a case's objects, in carrier form, have fields
// the upstream CRDs would prune.
func seedOnly(c *corpus.Case, schemas *celrules.Schemas) bool {
	for _, o := range append([]*unstructured.Unstructured{c.Object, c.OldObject}, c.Context...) {
		if o == nil {
			continue
		}
		u := corpus.ToCarriers(o)
		if len(schemas.Prune(u.GroupVersionKind(), u.Object)) > 0 {
			return true
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
