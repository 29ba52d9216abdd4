package corpus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// This file replays corpus cases as real creates and updates through a
// kube-apiserver with shepherd's webhooks registered (test/webhook on the
// seed-shaped CRDs, test/interop on the upstream ones) or in the native
// admission mode (test/native: the exported policies and the narrowed
// webhooks, compared by rule; test/vap: the exported policies alone). It
// cannot import the webhook packages (webhook's own tests import this
// package), so each suite hands it the admission chain as an AdmitFunc.

// Form is the shape a case is replayed in.
type Form int

const (
	// SeedForm sends the case as written: seed knobs in their seed fields,
	// for CRDs that carry them.
	SeedForm Form = iota
	// CarrierForm sends every object of the case through ToCarriers: seed
	// knobs in their carrier annotations, for the upstream CRDs.
	CarrierForm
)

func (f Form) String() string {
	if f == CarrierForm {
		return "carriers"
	}
	return "fields"
}

// ChainRequest is one request of a replay as the admission chain sees it.
type ChainRequest struct {
	// Operation is CREATE or UPDATE.
	Operation string
	Object    *unstructured.Unstructured
	// OldObject is the stored object of an UPDATE.
	OldObject *unstructured.Unstructured
	// Context are the objects the chain's lookups see.
	Context []*unstructured.Unstructured
}

// Verdict is the admission chain's answer to a ChainRequest, in the terms
// the apiserver's answer is compared in.
type Verdict struct {
	Allowed bool
	// Causes are the causes of the 422 Invalid shepherd answers a denial
	// with (server.InvalidStatus of the violations).
	Causes []metav1.StatusCause
	// Warnings are the admission warnings.
	Warnings []string
	// Patch is the defaulting patch.
	Patch []PatchOp
	// Object is the defaulted object.
	Object map[string]any
	// Audited are "rule/action" of every violation: what /audit records.
	Audited []string
}

// PatchOp is one operation of the defaulting patch.
type PatchOp struct {
	Operation string
	Path      string
}

// AdmitFunc answers r as shepherd's admission chain (webhook.Chain.Admit)
// does, with the rule configuration of the cluster replayed against.
type AdmitFunc func(t testing.TB, r ChainRequest) *Verdict

// AuditRecord is the part of an /audit record the replay compares.
type AuditRecord struct {
	Kind, Name, Operation, Rule, Action string
	DryRun                              bool
}

// ReplayEnv is a cluster serving shepherd's webhooks.
type ReplayEnv struct {
	// Client sends the requests.
	Client client.Client
	// TakeWarnings returns the warnings Client received since its last call
	// and forgets them. The replay expects no other request to use Client
	// concurrently.
	TakeWarnings func() []string
	// Namespace creates a fresh namespace and returns its name.
	Namespace func(t *testing.T) string
	// Audit, when set, reads serve's /audit records of namespace (all, for
	// "") since a time: every violation of the request must be audited.
	Audit func(t *testing.T, since time.Time, namespace string) ([]AuditRecord, error)
	// Timeout bounds each wait.
	Timeout time.Duration
}

// ReplayOptions selects how a case is replayed.
type ReplayOptions struct {
	Form Form
	// FieldValidation is the request's field validation
	// (metav1.FieldValidationStrict, Warn or Ignore).
	FieldValidation string
	// Admit is the admission chain.
	Admit AdmitFunc
	// UpstreamCRDs says the cluster's CRDs are the upstream ones: their own
	// validation (CEL, minimums) runs after the mutating and before the
	// validating webhook and may reject a request the chain denies first,
	// and their defaults may fill fields inside values shepherd's patch
	// set. Without it, every denial must come from shepherd and every
	// patched value must be stored exactly.
	UpstreamCRDs bool
	// CRDRejects, when set, says the CRD's own validation rejects this
	// request although the chain allows it, with an error containing
	// CRDRejects: a request shepherd would admit but the upstream API never
	// accepts. The replay asserts exactly that rejection.
	CRDRejects string
	// PreemptedDefaults are paths (JSON pointers) of shepherd's patch where
	// the CRD's own default, applied when the apiserver decodes the request
	// and so before shepherd's mutating webhook, wins over the chain's
	// (which defaults the object as sent), with why. The object read back
	// must hold a value other than the chain's there; every other path of
	// the patch must hold the chain's.
	PreemptedDefaults map[string]string
	// Native, when set, replays against shepherd's native admission mode
	// (the exported policies and the narrowed webhooks): its answers name
	// rules, not the chain's causes, so the replay compares the rules
	// instead of the exact answer (sameRules).
	Native *NativeMode
}

// NativeMode names the rule behind an answer of the native admission mode.
type NativeMode struct {
	// DeniedBy is the rule a denial of an operation comes from: the
	// exported policy's, or the narrowed webhook's; "" if neither.
	DeniedBy func(err error, operation string) string
	// WarnedBy is the rule of an admission warning; false when the warning
	// is not a rule's.
	WarnedBy func(warning string) (string, bool)
}

var (
	// policyDenial names the policy of a ValidatingAdmissionPolicy denial.
	policyDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)' with binding`)
	// policyWarning names the policy of a ValidatingAdmissionPolicy warning.
	policyWarning = regexp.MustCompile(`^Validation failed for ValidatingAdmissionPolicy '([^']+)'`)
)

// PolicyRule is the rule of an exported built-in policy's name
// (shepherd-v-tj-1 → V-TJ-1, the inverse of celrules.PolicyName).
func PolicyRule(policy string) string {
	return strings.ToUpper(strings.TrimPrefix(policy, "shepherd-"))
}

// DenyingPolicy is the name of the ValidatingAdmissionPolicy that denied
// with err; false when none did.
func DenyingPolicy(err error) (string, bool) {
	if m := policyDenial.FindStringSubmatch(err.Error()); m != nil {
		return m[1], true
	}
	return "", false
}

// PolicyDeniedBy is the rule of the exported policy that denied with err;
// "" when no ValidatingAdmissionPolicy did.
func PolicyDeniedBy(err error) string {
	if name, ok := DenyingPolicy(err); ok {
		return PolicyRule(name)
	}
	return ""
}

// PolicyWarnedBy is the rule of an exported policy's admission warning;
// false when the warning is not a ValidatingAdmissionPolicy's.
func PolicyWarnedBy(warning string) (string, bool) {
	if m := policyWarning.FindStringSubmatch(warning); m != nil {
		return PolicyRule(m[1]), true
	}
	return "", false
}

// PoliciesAlone is the native mode without shepherd's webhooks: the
// exported policies answer every request (test/vap).
var PoliciesAlone = &NativeMode{
	DeniedBy: func(err error, _ string) string { return PolicyDeniedBy(err) },
	WarnedBy: PolicyWarnedBy,
}

// contextOrder creates what other objects refer to first.
var contextOrder = map[string]int{"ClusterTrainingRuntime": 0, "TrainingRuntime": 1, "PodCliqueSet": 2, "TrainJob": 3}

// replaySeq makes the cluster-scoped names of each replay unique.
var replaySeq atomic.Int64

// Replay sends case c through the apiserver, as a create, or as a create
// of its old object and an update, after creating its context objects,
// and checks the apiserver's answer is exactly the chain's: allowed or
// denied, the 422's causes, the admission warnings, the defaults in the
// object read back, the audited rules; and that the apiserver warned of no
// unknown field and the object read back holds every field the chain's
// defaulted object has (nothing pruned). Each namespace of the case becomes
// a fresh one, and each cluster-scoped object (and every runtimeRef to a
// ClusterTrainingRuntime) gets a name of its own, so replays never see
// each other's objects.
func Replay(t *testing.T, env ReplayEnv, c *Case, opts ReplayOptions) {
	t.Helper()
	ctx := context.Background()
	k := env.Client
	object, oldObject, contexts := c.Object, c.OldObject, append([]*unstructured.Unstructured(nil), c.Context...)
	if opts.Form == CarrierForm {
		object, oldObject = ToCarriers(object), ToCarriers(oldObject)
		for i, o := range contexts {
			contexts[i] = ToCarriers(o)
		}
		object, oldObject = UpstreamRequired(object), UpstreamRequired(oldObject)
		for i, o := range contexts {
			contexts[i] = UpstreamRequired(o)
		}
	}
	if rt := RuntimeForOldTrainJob(oldObject, contexts); rt != nil {
		contexts = append(contexts, rt)
	}
	sort.SliceStable(contexts, func(i, j int) bool {
		return contextOrder[contexts[i].GetKind()] < contextOrder[contexts[j].GetKind()]
	})

	suffix := "-" + strconv.FormatInt(replaySeq.Add(1), 10)
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
				namespaces[orig] = env.Namespace(t)
			}
			u.SetNamespace(namespaces[orig])
		} else {
			u.SetName(u.GetName() + suffix)
			t.Cleanup(func() { deleteObject(t, k, u) })
		}
		if u.GetKind() == "TrainJob" {
			renameClusterRuntimeRef(u, suffix)
		}
		return u
	}
	// noPruning: the apiserver dropped no field of what it was sent (Warn
	// says so in a warning; Strict rejects the request instead).
	noPruning := func(what string, msgs []string) []string {
		var rest []string
		for _, m := range msgs {
			if strings.Contains(m, "unknown field") || strings.Contains(m, "duplicate field") {
				t.Errorf("%s: the apiserver dropped a field: %q", what, m)
				continue
			}
			rest = append(rest, m)
		}
		return rest
	}
	validation := client.FieldValidation(opts.FieldValidation)

	// create creates what the request needs first. An object that refers
	// to another (a TrainJob to its runtime) is admitted once shepherd's
	// informer cache has seen that one: retry shepherd's denials.
	create := func(what string, o *unstructured.Unstructured) {
		var err error
		_ = testkit.Poll(100*time.Millisecond, env.Timeout, func(context.Context) (bool, error) {
			err = k.Create(ctx, o, validation)
			return err == nil || !strings.Contains(err.Error(), "admission webhook"), nil
		})
		if err != nil {
			t.Fatalf("creating %s %s %s: %v", what, o.GetKind(), o.GetName(), err)
		}
		noPruning(what+" "+o.GetKind(), env.TakeWarnings())
	}

	env.TakeWarnings()
	var placed []*unstructured.Unstructured
	for _, o := range contexts {
		o = place(o)
		placed = append(placed, o.DeepCopy())
		create("context", o)
	}
	obj := place(object)
	var old *unstructured.Unstructured
	if oldObject != nil {
		old = place(oldObject)
	}

	// The verdict of the chain itself for this very request.
	want := opts.Admit(t, ChainRequest{Operation: c.OperationOrDefault(), Object: obj.DeepCopy(), OldObject: old.DeepCopy(), Context: placed})
	if want.Allowed != c.WantAllowed {
		t.Fatalf("the chain allowed=%v, the corpus wants %v", want.Allowed, c.WantAllowed)
	}

	if old != nil {
		stored := old.DeepCopy()
		create("the old object", stored)
		obj.SetResourceVersion(stored.GetResourceVersion())
		obj.SetUID(stored.GetUID())
	}
	send := func(dryRun bool) error {
		o := obj.DeepCopy()
		if old != nil {
			opts := []client.UpdateOption{validation}
			if dryRun {
				opts = append(opts, client.DryRunAll)
			}
			return k.Update(ctx, o, opts...)
		}
		opts := []client.CreateOption{validation}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		return k.Create(ctx, o, opts...)
	}
	// shepherd's lookups read its informer cache: wait (with dry runs,
	// which change nothing) until it has seen the context objects. A
	// rejection by the CRD's own validation does not depend on the cache.
	_ = testkit.Poll(100*time.Millisecond, env.Timeout, func(context.Context) (bool, error) {
		err := send(true)
		return (err == nil) == want.Allowed || rejectedByCRD(err), nil
	})

	env.TakeWarnings()
	start := time.Now()
	err := send(false)
	gotWarnings := noPruning("the request", env.TakeWarnings())

	if opts.CRDRejects != "" {
		if !want.Allowed || !rejectedByCRD(err) || !strings.Contains(err.Error(), opts.CRDRejects) {
			t.Fatalf("want the chain to allow it and the CRD's own validation to reject it with %q; chain allowed=%v, apiserver: %v", opts.CRDRejects, want.Allowed, err)
		}
		t.Logf("the chain allows it; the upstream CRD's own validation rejects it: %v", err)
		return
	}
	if !want.Allowed && opts.UpstreamCRDs && rejectedByCRD(err) {
		t.Logf("rejected by the upstream CRD's own validation before shepherd's validating webhook (the chain denies it too): %v", err)
		return
	}
	if (err == nil) != want.Allowed {
		t.Fatalf("apiserver allowed=%v (err %v), chain allowed=%v", err == nil, err, want.Allowed)
	}
	if opts.Native != nil {
		sameRules(t, err, gotWarnings, want, c.OperationOrDefault(), opts.Native)
		return
	}
	if err != nil {
		causes := ShepherdCauses(t, err)
		if diff := cmp.Diff(sortCauses(want.Causes), sortCauses(causes)); diff != "" {
			t.Errorf("causes (-chain +apiserver):\n%s", diff)
		}
	}
	if diff := cmp.Diff(unique(want.Warnings), unique(gotWarnings)); diff != "" {
		t.Errorf("warnings (-chain +apiserver):\n%s", diff)
	}
	if err == nil {
		checkReadBack(t, k, obj, want, opts)
	}
	if env.Audit != nil {
		checkAudited(t, env, obj, c.OperationOrDefault(), start, want.Audited)
	}
}

// checkReadBack reads obj back after the chain allowed it: every value of
// shepherd's patch is stored as the chain set it, and the stored spec,
// labels and annotations hold everything of the chain's defaulted object.
func checkReadBack(t *testing.T, k client.Client, obj *unstructured.Unstructured, want *Verdict, opts ReplayOptions) {
	t.Helper()
	upstreamCRDs := opts.UpstreamCRDs
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(obj.GroupVersionKind())
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatalf("reading back: %v", err)
	}
	admitted := deepCopyJSON(want.Object)
	for _, op := range want.Patch {
		got, found := Pointer(stored.Object, op.Path)
		if op.Operation == "remove" {
			if found {
				t.Errorf("defaulting removed %s, but the stored object has it", op.Path)
			}
			continue
		}
		exp, _ := Pointer(want.Object, op.Path)
		if why, ok := opts.PreemptedDefaults[op.Path]; ok {
			if found && Subset(got, exp) {
				t.Errorf("%s: stored %v, the chain's default: the CRD no longer pre-empts it (%s); drop it from the known divergences", op.Path, got, why)
				continue
			}
			t.Logf("known divergence: %s stored %v, the chain defaults it to %v: %s", op.Path, got, exp, why)
			setPointer(admitted, op.Path, got)
			continue
		}
		switch {
		case !found:
			t.Errorf("the chain defaults %s to %v, but the stored object lacks it (pruned)", op.Path, exp)
		case upstreamCRDs && !Subset(got, exp):
			t.Errorf("stored %s = %v, the chain defaults it to %v", op.Path, got, exp)
		case !upstreamCRDs && !reflect.DeepEqual(normalize(got), normalize(exp)):
			t.Errorf("stored %s = %v, the chain defaults it to %v", op.Path, got, exp)
		}
	}
	for _, p := range [][]string{{"spec"}, {"metadata", "labels"}, {"metadata", "annotations"}} {
		exp, _, _ := unstructured.NestedFieldNoCopy(admitted, p...)
		got, _, _ := unstructured.NestedFieldNoCopy(stored.Object, p...)
		if exp != nil && !Subset(got, exp) {
			t.Errorf("stored %s lacks what the chain admitted (pruned?) (-admitted +stored):\n%s", strings.Join(p, "."), cmp.Diff(roundTrip(exp), roundTrip(got)))
		}
	}
}

// checkAudited: every verdict of the request is audited, by rule.
func checkAudited(t *testing.T, env ReplayEnv, obj *unstructured.Unstructured, operation string, since time.Time, audited []string) {
	t.Helper()
	wantRules := append([]string(nil), audited...)
	sort.Strings(wantRules)
	if len(wantRules) == 0 {
		return
	}
	var got []string
	err := testkit.Poll(200*time.Millisecond, env.Timeout, func(context.Context) (bool, error) {
		rs, err := env.Audit(t, since, obj.GetNamespace())
		if err != nil {
			t.Logf("reading /audit: %v", err)
			return false, nil
		}
		got = got[:0]
		for _, r := range rs {
			if r.Kind == obj.GetKind() && r.Name == obj.GetName() && r.Operation == operation && !r.DryRun {
				got = append(got, r.Rule+"/"+r.Action)
			}
		}
		sort.Strings(got)
		return reflect.DeepEqual(got, wantRules), nil
	})
	if err != nil {
		t.Errorf("audited %v, the chain's violations are %v", got, wantRules)
	}
}

// sameRules checks a native-mode answer against the chain's verdict, which
// it has the same allowed as: a denial comes from a rule the chain denies
// with, and an admission is warned by the same Warn rules (the webhook
// mode's defaulter notices have no policy twin, and are not rules').
func sameRules(t *testing.T, err error, warnings []string, want *Verdict, operation string, n *NativeMode) {
	t.Helper()
	deny, warn := sets.New[string](), sets.New[string]()
	for _, a := range want.Audited {
		rule, action, _ := strings.Cut(a, "/")
		switch action {
		case string(shepherdv1alpha1.ActionDeny):
			deny.Insert(rule)
		case string(shepherdv1alpha1.ActionWarn):
			warn.Insert(rule)
		}
	}
	if err != nil {
		if rule := n.DeniedBy(err, operation); !deny.Has(rule) {
			t.Errorf("denied by %q in native mode; the chain denies with %v: %v", rule, sets.List(deny), err)
		}
		return
	}
	warned := sets.New[string]()
	for _, w := range warnings {
		if rule, ok := n.WarnedBy(w); ok {
			warned.Insert(rule)
		}
	}
	if !warned.Equal(warn) {
		t.Errorf("warned by %v in native mode, by %v in webhook mode (warnings %q)", sets.List(warned), sets.List(warn), warnings)
	}
}

// rejectedByCRD: err is a 422 Invalid that neither an admission webhook
// nor a ValidatingAdmissionPolicy answered: the CRD's own validation
// (schema, CEL) between mutating and validating admission.
func rejectedByCRD(err error) bool {
	return err != nil && apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "admission webhook") &&
		!strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// ShepherdCauses asserts err is the apiserver's rendering of shepherd's
// denial, one 422 Invalid naming one of its webhooks, and returns its causes.
func ShepherdCauses(t *testing.T, err error) []metav1.StatusCause {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("want a 422 Invalid from shepherd, got %v", err)
	}
	st := se.ErrStatus
	if st.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid {
		t.Fatalf("want code 422 reason Invalid, got %d %s: %s", st.Code, st.Reason, st.Message)
	}
	if !strings.Contains(st.Message, `admission webhook "validate.shepherd.dev" denied the request`) &&
		!strings.Contains(st.Message, `admission webhook "default.shepherd.dev" denied the request`) {
		t.Fatalf("the denial does not come from shepherd's webhooks: %s", st.Message)
	}
	if st.Details == nil {
		t.Fatalf("the denial has no details: %s", st.Message)
	}
	return st.Details.Causes
}

// kubectlFatal serialises the use of kubectl's error handler, which is
// a package variable.
var kubectlFatal sync.Mutex

// KubectlMessage is what kubectl prints for err: its own error
// rendering (cmdutil.CheckErr), captured instead of exiting.
func KubectlMessage(err error) string {
	kubectlFatal.Lock()
	defer kubectlFatal.Unlock()
	var printed string
	cmdutil.BehaviorOnFatal(func(msg string, _ int) { printed = msg })
	defer cmdutil.DefaultBehaviorOnFatal()
	cmdutil.CheckErr(err)
	return printed
}

// RuntimeForOldTrainJob is a minimal runtime for an UPDATE case of a
// TrainJob that names no runtime in its context: the old object must first
// be created through the webhook, whose V-TJ-3 wants the runtime to exist.
// The runtime has no podGroupPolicy, so it changes no UPDATE verdict.
func RuntimeForOldTrainJob(old *unstructured.Unstructured, contexts []*unstructured.Unstructured) *unstructured.Unstructured {
	if old == nil || old.GetKind() != "TrainJob" {
		return nil
	}
	name, _, _ := unstructured.NestedString(old.Object, "spec", "runtimeRef", "name")
	kind, _, _ := unstructured.NestedString(old.Object, "spec", "runtimeRef", "kind")
	if kind == "" {
		kind = "ClusterTrainingRuntime"
	}
	for _, o := range contexts {
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
		rt.SetNamespace(old.GetNamespace())
	}
	return rt
}

// UpstreamRequired returns u with the fields the upstream CRDs require
// and the seed-shaped ones do not, which the corpus leaves out: Grove's
// roleName of a PodClique's spec (in a PodCliqueSet's cliques too), set to
// the clique's name as Grove's operator names roles. No rule of shepherd
// reads it; the chain's verdict is computed on the same object.
func UpstreamRequired(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u == nil || u.GroupVersionKind().Group != "grove.io" {
		return u
	}
	u = u.DeepCopy()
	setRole := func(spec map[string]any, name string) {
		if _, ok := spec["roleName"]; !ok && name != "" {
			spec["roleName"] = name
		}
	}
	switch u.GetKind() {
	case "PodCliqueSet":
		cliques, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "cliques")
		for _, c := range cliques {
			cm, _ := c.(map[string]any)
			if spec, ok := cm["spec"].(map[string]any); ok {
				name, _ := cm["name"].(string)
				setRole(spec, name)
			}
		}
		if cliques != nil {
			_ = unstructured.SetNestedSlice(u.Object, cliques, "spec", "template", "cliques")
		}
	case "PodClique":
		if spec, ok := u.Object["spec"].(map[string]any); ok {
			setRole(spec, u.GetName())
		}
	}
	return u
}

// renameClusterRuntimeRef follows a ClusterTrainingRuntime's new name in a
// TrainJob's runtimeRef (kind defaults to ClusterTrainingRuntime).
func renameClusterRuntimeRef(u *unstructured.Unstructured, suffix string) {
	name, _, _ := unstructured.NestedString(u.Object, "spec", "runtimeRef", "name")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "runtimeRef", "kind")
	if name == "" || (kind != "" && kind != "ClusterTrainingRuntime") {
		return
	}
	_ = unstructured.SetNestedField(u.Object, name+suffix, "spec", "runtimeRef", "name")
}

func deleteObject(t *testing.T, k client.Client, u *unstructured.Unstructured) {
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(u.GroupVersionKind())
	o.SetName(u.GetName())
	o.SetNamespace(u.GetNamespace())
	if err := k.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
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

func deepCopyJSON(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	out, _ := roundTrip(obj).(map[string]any)
	return out
}

// setPointer sets the value at an existing JSON pointer of a decoded object.
func setPointer(obj map[string]any, ptr string, v any) {
	i := strings.LastIndex(ptr, "/")
	if i < 0 {
		return
	}
	parent, ok := Pointer(obj, ptr[:i])
	if ptr[:i] == "" {
		parent, ok = obj, true
	}
	if !ok {
		return
	}
	tok := strings.ReplaceAll(strings.ReplaceAll(ptr[i+1:], "~1", "/"), "~0", "~")
	switch p := parent.(type) {
	case map[string]any:
		p[tok] = v
	case []any:
		if n, err := strconv.Atoi(tok); err == nil && n >= 0 && n < len(p) {
			p[n] = v
		}
	}
}

// Pointer resolves an RFC 6901 JSON pointer in a decoded object.
func Pointer(obj map[string]any, ptr string) (any, bool) {
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

// Subset reports whether every field of want is in got with the same value
// (a CRD's defaults may add fields inside an object or list item); lists
// have the same length; numbers compare across JSON decoders.
func Subset(got, want any) bool {
	g, w := roundTrip(got), roundTrip(want)
	return contains(g, w)
}

func roundTrip(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func contains(g, w any) bool {
	switch wv := w.(type) {
	case map[string]any:
		gm, ok := g.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range wv {
			gv, ok := gm[k]
			if !ok || !contains(gv, v) {
				return false
			}
		}
		return true
	case []any:
		gl, ok := g.([]any)
		if !ok || len(gl) != len(wv) {
			return false
		}
		for i := range wv {
			if !contains(gl[i], wv[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(g, w)
}
