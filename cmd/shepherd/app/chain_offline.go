package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// This file is the offline admission shared by `shepherd check` and
// `shepherd test`: one place builds the chain and admits an object, so a
// suite's verdict is check's verdict by construction.

// newOfflineChain builds the chain check runs: the built-in rules of cfg,
// lookups answered from ctxObjs, and every policy. ctxObjs are namespaced
// and pruned in place: they stand for stored objects, and the apiserver
// keeps only what their schema has. A policy that does not compile is a
// usage error (exit 2), naming the policy, as is an exception naming an
// unknown rule. Exceptions expire by the real clock, as on a cluster.
func newOfflineChain(cfg celrules.Config, ctxObjs []manifest, policies []*shepherdv1alpha1.WorkloadPolicy, excs []*shepherdv1alpha1.PolicyException, workloadAPI bool) (*webhook.Chain, error) {
	schemas := cfg.Schemas
	lookupObjs := make([]runtime.Object, 0, len(ctxObjs))
	for _, m := range ctxObjs {
		defaultNamespace(schemas, m.obj)
		schemas.Prune(m.obj.GroupVersionKind(), m.obj.Object)
		schemas.DropNulls(m.obj.GroupVersionKind(), m.obj.Object)
		lookupObjs = append(lookupObjs, m.obj)
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
			return nil, &ExitError{Code: 2, Err: fmt.Errorf("WorkloadPolicy %q does not compile:\n%s", p.Name, indent(errs.ToAggregate().Error()))}
		}
	}
	set, err := exceptionSet(excs, policies)
	if err != nil {
		return nil, err
	}
	chain.SetExceptions(set)
	return chain, nil
}

// admitOffline admits obj as the apiserver and shepherd's webhooks would:
// fields the schema lacks are pruned first and reported (denied under
// Strict field validation, a warning under Warn), old (the stored object
// of an UPDATE or DELETE, or nil) is pruned as stored objects are, and the
// chain runs within timeout. obj and old are changed in place; both are
// expected in their namespace already (defaultNamespace).
func admitOffline(ctx context.Context, chain *webhook.Chain, schemas *celrules.Schemas, op string, obj, old *unstructured.Unstructured, fieldValidation string, timeout time.Duration) (*webhook.Verdict, error) {
	// The apiserver prunes (Warn) or rejects (Strict) fields the cluster's
	// schema does not have before admission sees the object: judge what it
	// would store, and say so.
	unknown := unknownFields(schemas, obj, fieldValidation)
	if old != nil {
		schemas.Prune(old.GroupVersionKind(), old.Object)
		schemas.DropNulls(old.GroupVersionKind(), old.Object)
	}
	req, err := checkRequest(op, obj, old)
	if err != nil {
		return nil, err
	}
	v, err := admitWithin(ctx, chain, req, timeout)
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

// runWithin runs f on req with a deadline of timeout. f gets a context
// carrying the deadline, so expressions stop at it; should one not, the
// caller still returns at the deadline: f runs in a goroutine that is left
// behind (the command is about to exit).
func runWithin(ctx context.Context, timeout time.Duration, f func(context.Context, *webhook.Request) *webhook.Verdict, req *webhook.Request) (*webhook.Verdict, error) {
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
			return fmt.Errorf("%w=%v: a rule takes too long on this object (or the object is very large); simplify the rule, or raise --timeout", errTimeout, timeout)
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
