package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/test/seedcrds"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// contextOrder creates what other objects refer to first.
var contextOrder = map[string]int{"ClusterTrainingRuntime": 0, "TrainingRuntime": 1, "PodCliqueSet": 2, "TrainJob": 3}

// TestCorpusThroughTheAPIServer replays the admission corpus as real
// creates and updates through the apiserver and shepherd's webhooks, and
// checks the answer is exactly the chain's (the same chain `shepherd check`
// runs): allowed or denied, the 422's causes, the admission warnings, the
// defaults in the stored object, and the audited rules. Cases that need a
// non-default server configuration or a cluster without the Workload API
// are covered by test/corpus's replay through the chain only.
func TestCorpusThroughTheAPIServer(t *testing.T) {
	cases, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for i := range cases {
		c := &cases[i]
		if !reflect.DeepEqual(c.Config, celrules.Config{}) || c.NoWorkloadAPI {
			t.Logf("%s: needs its own server configuration; covered by test/corpus", c.Name)
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) { replay(t, c) })
	}
	if ran == 0 {
		t.Fatal("no corpus case ran")
	}
	t.Logf("%d of %d corpus cases replayed through the apiserver", ran, len(cases))
}

func replay(t *testing.T, c *corpus.Case) {
	ctx := context.Background()
	// Each namespace of the case becomes a fresh one, so cases never see
	// each other's objects and "a runtime in another namespace" stays so.
	namespaces := map[string]string{}
	place := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u = u.DeepCopy()
		namespaced, err := k.IsObjectNamespaced(u)
		if err != nil {
			t.Fatalf("%s: %v", u.GetKind(), err)
		}
		if namespaced {
			orig := u.GetNamespace()
			if namespaces[orig] == "" {
				namespaces[orig] = namespace(t, nil)
			}
			u.SetNamespace(namespaces[orig])
		} else {
			// Cluster-scoped names are shared by every case: start clean
			// and leave clean.
			removeClusterScoped(t, u)
			t.Cleanup(func() { removeClusterScoped(t, u) })
		}
		return u
	}

	var ctxObjs []runtime.Object
	contexts := append([]*unstructured.Unstructured(nil), c.Context...)
	if rt := runtimeForOldTrainJob(c); rt != nil {
		contexts = append(contexts, rt)
	}
	sort.SliceStable(contexts, func(i, j int) bool {
		return contextOrder[contexts[i].GetKind()] < contextOrder[contexts[j].GetKind()]
	})
	for _, o := range contexts {
		o = place(o)
		ctxObjs = append(ctxObjs, o.DeepCopy())
		if err := k.Create(ctx, o); err != nil {
			t.Fatalf("creating context %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	obj := place(c.Object)
	var old *unstructured.Unstructured
	if c.OldObject != nil {
		old = place(c.OldObject)
	}

	// The verdict of the chain itself for this very request.
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(ctxObjs, true), Rules: seedcrds.Config(celrules.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	req := &webhook.Request{
		Operation: admissionv1.Operation(c.OperationOrDefault()),
		Kind:      metav1.GroupVersionKind{Group: obj.GroupVersionKind().Group, Version: obj.GroupVersionKind().Version, Kind: obj.GetKind()},
		Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Object: mustJSON(t, obj.Object),
	}
	if old != nil {
		req.OldObject = mustJSON(t, old.Object)
	}
	want := chain.Admit(ctx, req)

	if old != nil {
		stored := old.DeepCopy()
		if err := k.Create(ctx, stored); err != nil {
			t.Fatalf("creating the old object: %v", err)
		}
		obj.SetResourceVersion(stored.GetResourceVersion())
		obj.SetUID(stored.GetUID())
	}
	send := func(dryRun bool) (*unstructured.Unstructured, error) {
		o := obj.DeepCopy()
		if old != nil {
			var opts []client.UpdateOption
			if dryRun {
				opts = append(opts, client.DryRunAll)
			}
			return o, k.Update(ctx, o, opts...)
		}
		var opts []client.CreateOption
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		return o, k.Create(ctx, o, opts...)
	}
	// shepherd's lookups read its informer cache: wait (with dry runs,
	// which change nothing) until it has seen the context objects.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, err := send(true)
		return (err == nil) == want.Allowed, nil
	})

	start := time.Now()
	warns.take()
	stored, err := send(false)
	gotWarnings := serverWarnings(warns.take())

	if (err == nil) != c.WantAllowed || want.Allowed != c.WantAllowed {
		t.Fatalf("apiserver allowed=%v (err %v), chain allowed=%v, corpus wants %v", err == nil, err, want.Allowed, c.WantAllowed)
	}
	if err != nil {
		var se *apierrors.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("not a status error: %v", err)
		}
		causes := statusError(t, err)
		wantCauses := server.InvalidStatus(req, want.Violations).Details.Causes
		if diff := cmp.Diff(sortCauses(wantCauses), sortCauses(causes)); diff != "" {
			t.Errorf("causes (-chain +apiserver):\n%s", diff)
		}
	}
	if diff := cmp.Diff(unique(want.Warnings), unique(gotWarnings)); diff != "" {
		t.Errorf("warnings (-chain +apiserver):\n%s", diff)
	}
	if err == nil {
		for _, op := range want.Patch {
			if op.Operation == "remove" {
				if _, found := pointer(stored.Object, op.Path); found {
					t.Errorf("defaulting removed %s, but the stored object has it", op.Path)
				}
				continue
			}
			got, _ := pointer(stored.Object, op.Path)
			exp, _ := pointer(want.Object, op.Path)
			if !reflect.DeepEqual(normalize(got), normalize(exp)) {
				t.Errorf("stored %s = %v, the chain defaults it to %v", op.Path, got, exp)
			}
		}
	}

	// Every verdict of the request is audited, by rule.
	var wantRules []string
	for _, v := range want.Violations {
		wantRules = append(wantRules, v.Rule+"/"+string(v.Action))
	}
	sort.Strings(wantRules)
	if len(wantRules) > 0 {
		q := "since=" + start.UTC().Format(time.RFC3339Nano)
		if obj.GetNamespace() != "" {
			q += "&namespace=" + obj.GetNamespace()
		}
		var got []string
		auditRecords(t, q, func(rs []audit.Record) bool {
			got = got[:0]
			for _, r := range rs {
				if r.Kind == obj.GetKind() && r.Name == obj.GetName() && r.Operation == c.OperationOrDefault() && !r.DryRun {
					got = append(got, r.Rule+"/"+r.Action)
				}
			}
			sort.Strings(got)
			return reflect.DeepEqual(got, wantRules)
		})
	}
}

// runtimeForOldTrainJob is a minimal runtime for an UPDATE case of a
// TrainJob that names no runtime in its context: the old object must first
// be created through the webhook, whose V-TJ-3 wants the runtime to exist.
// The runtime has no podGroupPolicy, so it changes no UPDATE verdict.
func runtimeForOldTrainJob(c *corpus.Case) *unstructured.Unstructured {
	if c.OldObject == nil || c.OldObject.GetKind() != "TrainJob" {
		return nil
	}
	name, _, _ := unstructured.NestedString(c.OldObject.Object, "spec", "runtimeRef", "name")
	kind, _, _ := unstructured.NestedString(c.OldObject.Object, "spec", "runtimeRef", "kind")
	if kind == "" {
		kind = "ClusterTrainingRuntime"
	}
	for _, o := range c.Context {
		if o.GetKind() == kind && o.GetName() == name {
			return nil
		}
	}
	rt := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{
			map[string]any{"name": "node", "template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "c", "image": "i"}}}}}}},
		}}}},
	}}
	if kind == "TrainingRuntime" {
		rt.SetNamespace(c.OldObject.GetNamespace())
	}
	return rt
}

func removeClusterScoped(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(u.GroupVersionKind())
	o.SetName(u.GetName())
	if err := k.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	eventually(t, "deleting "+u.GetName(), func() (bool, error) {
		err := k.Get(ctx, client.ObjectKeyFromObject(o), o)
		return apierrors.IsNotFound(err), nil
	})
}

// serverWarnings drops the apiserver's own warnings (field validation of
// fields the CRD schema does not know), leaving shepherd's.
func serverWarnings(ws []string) []string {
	var out []string
	for _, w := range ws {
		if strings.HasPrefix(w, "unknown field") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// unique sorts and de-duplicates: the apiserver sends a repeated warning once.
func unique(ws []string) []string {
	m := map[string]bool{}
	for _, w := range ws {
		m[w] = true
	}
	out := make([]string, 0, len(m))
	for w := range m {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

func sortCauses(cs []metav1.StatusCause) []metav1.StatusCause {
	out := append([]metav1.StatusCause(nil), cs...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Field != out[j].Field {
			return out[i].Field < out[j].Field
		}
		return out[i].Message < out[j].Message
	})
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pointer resolves an RFC 6901 JSON pointer in a decoded object.
func pointer(obj map[string]any, ptr string) (any, bool) {
	var cur any = obj
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// normalize makes numbers comparable across JSON decoders (int64 vs float64).
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return fmt.Sprint(out)
}
