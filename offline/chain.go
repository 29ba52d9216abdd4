package offline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// NewChain builds the chain check runs: the built-in rules of cfg,
// lookups answered from ctxObjs, and every policy. ctxObjs are namespaced
// and pruned in place: they stand for stored objects, and the apiserver
// keeps only what their schema has. A policy that does not compile is an
// error naming the policy, as is an exception naming an unknown rule (the
// commands exit 2). Exceptions expire by the real clock, as on a cluster.
func NewChain(cfg celrules.Config, ctxObjs []Manifest, policies []*shepherdv1alpha1.WorkloadPolicy, excs []*shepherdv1alpha1.PolicyException, workloadAPI bool) (*webhook.Chain, error) {
	schemas := cfg.Schemas
	lookupObjs := make([]runtime.Object, 0, len(ctxObjs))
	for _, m := range ctxObjs {
		DefaultNamespace(schemas, m.Obj)
		schemas.Prune(m.Obj.GroupVersionKind(), m.Obj.Object)
		schemas.DropNulls(m.Obj.GroupVersionKind(), m.Obj.Object)
		lookupObjs = append(lookupObjs, m.Obj)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{
		Lookups: webhook.NewObjectLookups(lookupObjs, workloadAPI),
		Rules:   cfg,
		// Offline there is no apiserver to validate the schema first.
		CheckSchemas: true,
	})
	if err != nil {
		return nil, err
	}
	for _, p := range policies {
		if errs := chain.SetPolicy(p); len(errs) > 0 {
			return nil, fmt.Errorf("WorkloadPolicy %q does not compile:\n%s", p.Name, Indent(errs.ToAggregate().Error()))
		}
	}
	set, err := ExceptionSet(excs, policies)
	if err != nil {
		return nil, err
	}
	chain.SetExceptions(set)
	return chain, nil
}

// Admit admits obj as the apiserver and shepherd's webhooks would:
// fields the schema lacks are pruned first and reported (denied under
// Strict field validation, a warning under Warn), old (the stored object
// of an UPDATE or DELETE, or nil) is pruned as stored objects are, and the
// chain runs within timeout. obj and old are changed in place; both are
// expected in their namespace already (DefaultNamespace).
func Admit(ctx context.Context, chain *webhook.Chain, schemas *celrules.Schemas, op string, obj, old *unstructured.Unstructured, fieldValidation string, timeout time.Duration) (*webhook.Verdict, error) {
	// The apiserver prunes (Warn) or rejects (Strict) fields the cluster's
	// schema does not have before admission sees the object: judge what it
	// would store, and say so.
	unknown := UnknownFields(schemas, obj, fieldValidation)
	if old != nil {
		schemas.Prune(old.GroupVersionKind(), old.Object)
		schemas.DropNulls(old.GroupVersionKind(), old.Object)
	}
	req, err := Request(op, obj, old)
	if err != nil {
		return nil, err
	}
	v, err := AdmitWithin(ctx, chain, req, timeout)
	if err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		v.Violations = append(unknown, v.Violations...)
		for _, u := range unknown {
			if u.Action == webhook.ActionDeny {
				v.Allowed = false
			}
		}
	}
	return v, nil
}

// RunWithin runs f on req with a deadline of timeout. f gets a context
// carrying the deadline, so expressions stop at it; should one not, the
// caller still returns at the deadline: f runs in a goroutine that is left
// behind (the command is about to exit).
func RunWithin(ctx context.Context, timeout time.Duration, f func(context.Context, *webhook.Request) *webhook.Verdict, req *webhook.Request) (*webhook.Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		v *webhook.Verdict
		// late: the deadline passed while f ran, so its verdict may hold
		// the errors of interrupted expressions, not a judgement.
		late bool
	}
	done := make(chan answer, 1)
	go func() {
		v := f(ctx, req)
		done <- answer{v: v, late: ctx.Err() != nil}
	}()
	timedOut := func() error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w=%v: a rule takes too long on this object (or the object is very large); simplify the rule, or raise --timeout", ErrTimeout, timeout)
		}
		return ctx.Err() // the caller's context ended (interrupted)
	}
	select {
	case a := <-done:
		if a.late {
			return nil, timedOut()
		}
		return a.v, nil
	case <-ctx.Done():
		return nil, timedOut()
	}
}

// ExceptionSet checks the exceptions read from --policy and parses them:
// a rule that is neither built in nor one of policies, or a selector that
// does not parse, is an error naming the exception and field, as an
// unknown --disable-rule is.
func ExceptionSet(excs []*shepherdv1alpha1.PolicyException, policies []*shepherdv1alpha1.WorkloadPolicy) (*exceptions.Set, error) {
	builtin, err := webhook.BuiltinRuleIDs()
	if err != nil {
		return nil, err
	}
	known := func(rule string) bool {
		return slices.Contains(builtin, rule) || slices.ContainsFunc(policies, func(p *shepherdv1alpha1.WorkloadPolicy) bool { return p.Name == rule })
	}
	for _, e := range excs {
		if errs := exceptions.Validate(e, known); len(errs) > 0 {
			return nil, fmt.Errorf("PolicyException %q: %s; a rule is a built-in rule ID (shepherd export rules lists them) or the name of a WorkloadPolicy given with --policy", e.Name, errs.ToAggregate())
		}
	}
	set, err := exceptions.NewSet(excs)
	if err != nil {
		return nil, err
	}
	return set, nil
}

// UnknownFields prunes obj like the apiserver (fields the schema lacks,
// then nulls it does not allow) and reports each unknown field: denied
// under Strict (kubectl's default), a warning under Warn.
func UnknownFields(s *celrules.Schemas, obj *unstructured.Unstructured, validation string) []webhook.Violation {
	var out []webhook.Violation
	unknown := s.Prune(obj.GroupVersionKind(), obj.Object)
	s.DropNulls(obj.GroupVersionKind(), obj.Object)
	for _, path := range unknown {
		msg := fmt.Sprintf("unknown field: the schema of %s in %s has no such field", obj.GetKind(), s.Source)
		if hint := celrules.CarrierHint(path); hint != "" {
			msg += "; " + hint
		}
		v := webhook.Violation{Rule: webhook.RuleSchema, Field: path, Action: webhook.ActionDeny, Message: msg + " (rejected under Strict field validation, dropped under Warn)"}
		if validation == metav1.FieldValidationWarn {
			v.Action = webhook.ActionWarn
		}
		out = append(out, v)
	}
	return out
}

// Indent indents every line of s by two spaces, for errors listed under
// the line that names what they are about.
func Indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// DefaultNamespace puts namespaced shepherd kinds without a namespace into
// "default", as kubectl would.
func DefaultNamespace(s *celrules.Schemas, u *unstructured.Unstructured) {
	if u == nil || u.GetNamespace() != "" {
		return
	}
	switch u.GroupVersionKind().GroupKind() {
	case schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "ClusterTrainingRuntime"},
		schema.GroupKind{Group: "shepherd.dev", Kind: "WorkloadPolicy"},
		schema.GroupKind{Group: "shepherd.dev", Kind: exceptions.Kind},
		schema.GroupKind{Kind: "Namespace"}:
		return
	}
	if len(s.Versions(u.GroupVersionKind().GroupKind())) > 0 {
		u.SetNamespace("default")
	}
}

// MatchOld finds the stored object for m: the one of the same group,
// kind, namespace and name. When both sides hold one object, that one,
// which must then be the same object: judging an UPDATE from another
// object would report every differing field as a change (false
// "immutable" errors).
func MatchOld(m Manifest, olds []Manifest, nObjects int) (*unstructured.Unstructured, error) {
	if len(olds) == 1 && nObjects == 1 {
		if diff := ObjectDiff(m.Obj, olds[0].Obj); diff != "" {
			return nil, fmt.Errorf("%s: --old %s is another object (%s): --old must hold the stored version of the same object (same group, kind, namespace and name)", m, olds[0], diff)
		}
		return olds[0].Obj, nil
	}
	for _, o := range olds {
		if ObjectDiff(m.Obj, o.Obj) == "" {
			return o.Obj, nil
		}
	}
	return nil, fmt.Errorf("%s: no object in --old is the stored version of %s %s; add it (same group, kind, namespace and name) or check this object alone", m, GroupKind(m.Obj), NamespacedName(m.Obj))
}

// ObjectDiff says how old is not the same object as obj, or "".
func ObjectDiff(obj, old *unstructured.Unstructured) string {
	var diffs []string
	if gk, oldGK := obj.GroupVersionKind().GroupKind(), old.GroupVersionKind().GroupKind(); gk != oldGK {
		diffs = append(diffs, fmt.Sprintf("kind %s, not %s", GroupKind(old), GroupKind(obj)))
	}
	if obj.GetNamespace() != old.GetNamespace() {
		diffs = append(diffs, fmt.Sprintf("namespace %q, not %q", old.GetNamespace(), obj.GetNamespace()))
	}
	if obj.GetName() != old.GetName() {
		diffs = append(diffs, fmt.Sprintf("name %q, not %q", old.GetName(), obj.GetName()))
	}
	return strings.Join(diffs, "; ")
}

// GroupKind renders u's kind as Kind.group (Kind for the core group).
func GroupKind(u *unstructured.Unstructured) string {
	return u.GroupVersionKind().GroupKind().String()
}

// NamespacedName is u's namespace/name, or its name when cluster-scoped.
func NamespacedName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// ErrTimeout is the admission of one object outrunning --timeout.
var ErrTimeout = errors.New("admission did not finish within --timeout")

// AdmitWithin runs the chain on req with a deadline of timeout
// (RunWithin).
func AdmitWithin(ctx context.Context, chain *webhook.Chain, req *webhook.Request, timeout time.Duration) (*webhook.Verdict, error) {
	return RunWithin(ctx, timeout, chain.Admit, req)
}

// Request is the admission request of op on obj as the apiserver would
// send it, by the user shepherd-check: old is the stored object of an
// UPDATE or DELETE (a DELETE without one deletes obj itself).
func Request(op string, obj, old *unstructured.Unstructured) (*webhook.Request, error) {
	subject := obj
	if op == "DELETE" && old != nil {
		subject = old
	}
	gvk := subject.GroupVersionKind()
	req := &webhook.Request{
		UID:       "shepherd-check",
		Operation: admissionv1.Operation(op),
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: subject.GetNamespace(),
		Name:      subject.GetName(),
		UserInfo:  authenticationv1.UserInfo{Username: "shepherd-check"},
	}
	var err error
	if op != "DELETE" {
		if req.Object, err = json.Marshal(obj.Object); err != nil {
			return nil, err
		}
	}
	if old != nil {
		if req.OldObject, err = json.Marshal(old.Object); err != nil {
			return nil, err
		}
	}
	if op == "DELETE" && old == nil {
		// DELETE of the given manifest: it is the stored object.
		if req.OldObject, err = json.Marshal(obj.Object); err != nil {
			return nil, err
		}
	}
	return req, nil
}
