package updatefilter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
)

// RuleSet is what the keeper needs of the admission chain.
type RuleSet interface {
	// Version changes whenever the rule set does.
	Version() uint64
	UpdateReads() celrules.Reads
	// HasWork reports whether the mutating (or validating) webhook has
	// anything to do for an op request on gr.
	HasWork(mutating bool, gr schema.GroupResource, op string) bool
}

// WorkConditionName names the matchCondition that spares shepherd's
// webhooks the requests on which no rule, WorkloadPolicy, Go check or
// defaulter has work: a kind and operation whose every rule is enforced
// upstream (docs/concepts.md, "Who enforces what"), or switched off.
const WorkConditionName = "shepherd.dev/has-work"

// Permissions the Keeper needs, on shepherd's own two configurations only
// (for RBAC generation; test/rbac checks the shipped RBAC grants them).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;patch,resourceNames=defaults.shepherd.dev
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;patch,resourceNames=shepherd

// Keeper is a leader-only runnable: it keeps the condition in the webhook
// configurations named Mutating and Validating in step with Rules.
type Keeper struct {
	// Client patches the configurations; Reader reads them uncached (the
	// manager's APIReader): shepherd may get and patch its two
	// configurations by name only, which an informer cannot list.
	Client     client.Client
	Reader     client.Reader
	Rules      RuleSet
	Mutating   string
	Validating string
	// Interval is how often the rule set's version is looked at; a
	// changed rule set is reflected within it.
	Interval time.Duration
}

// NeedLeaderElection: one writer of the configurations.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start keeps the condition until ctx ends. Write errors are logged and
// retried at the next tick: the webhooks keep working meanwhile, sent
// more UPDATEs than needed (or, for a rule just added, fewer, for at most
// that long).
func (k *Keeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("updatefilter")
	interval := k.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var done uint64
	synced := false
	for {
		if v := k.Rules.Version(); !synced || v != done {
			reads := k.Rules.UpdateReads()
			if err := k.Sync(ctx, reads); err != nil {
				log.Error(err, "keeping the UPDATE matchCondition of shepherd's webhook configurations; retrying")
			} else {
				expr, ok := reads.UpdateMatchCondition()
				if ok {
					log.Info("UPDATEs reach the webhooks only when they change what a rule reads", "regions", reads.Regions, "condition", expr)
				} else {
					log.Info("every UPDATE reaches the webhooks", "because", why(reads))
				}
				done, synced = v, true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func why(r celrules.Reads) string {
	if r.Unconditional != "" {
		return r.Unconditional
	}
	return "a rule reads the whole object"
}

// Sync writes the condition of reads into both configurations.
func (k *Keeper) Sync(ctx context.Context, reads celrules.Reads) error {
	expr, ok := reads.UpdateMatchCondition()
	var want *admissionregistrationv1.MatchCondition
	if ok {
		want = &admissionregistrationv1.MatchCondition{Name: celrules.UpdateMatchConditionName, Expression: expr}
	}
	if k.Mutating != "" {
		if err := k.syncOne(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{}, k.Mutating, want); err != nil {
			return err
		}
	}
	if k.Validating != "" {
		if err := k.syncOne(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{}, k.Validating, want); err != nil {
			return err
		}
	}
	return nil
}

func (k *Keeper) syncOne(ctx context.Context, obj client.Object, name string, want *admissionregistrationv1.MatchCondition) error {
	log := ctrl.LoggerFrom(ctx).WithName("updatefilter")
	if err := k.Reader.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // not installed (yet): nothing to keep
		}
		return fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	orig := obj.DeepCopyObject().(client.Object)
	changed := false
	// keep sets both of shepherd's conditions on one webhook of the
	// configuration and reports whether it changed them.
	keep := func(hook string, rules []admissionregistrationv1.RuleWithOperations, conds *[]admissionregistrationv1.MatchCondition, mutating bool) bool {
		updated := withCondition(conds, celrules.UpdateMatchConditionName, want)
		work, idle := workCondition(rules, mutating, k.Rules)
		if !withCondition(conds, WorkConditionName, work) {
			return updated
		}
		if len(idle) == 0 {
			log.Info("every request the webhook's rules name reaches it again", "webhook", hook)
		} else {
			log.Info("requests kept from the webhook: nothing in force works on them (shepherd export rules says which rules are enforced upstream)", "webhook", hook, "requests", idle)
		}
		return true
	}
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range c.Webhooks {
			h := &c.Webhooks[i]
			changed = keep(h.Name, h.Rules, &h.MatchConditions, true) || changed
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range c.Webhooks {
			h := &c.Webhooks[i]
			if h.Name == api.PolicyWebhookName {
				continue // WorkloadPolicies: no rule reads them
			}
			changed = keep(h.Name, h.Rules, &h.MatchConditions, false) || changed
		}
	}
	if !changed {
		return nil
	}
	// A strategic merge patch touches only the matchConditions entry of
	// shepherd's name (webhooks and matchConditions merge by name); the
	// resourceVersion precondition keeps a concurrent caBundle injection.
	patch := client.StrategicMergeFrom(orig, client.MergeFromWithOptimisticLock{})
	if err := k.Client.Patch(ctx, obj, patch, client.FieldOwner(api.FieldManager)); err != nil {
		return fmt.Errorf("patching the matchConditions of webhook configuration %s: %w", name, err)
	}
	return nil
}

// workCondition is the has-work matchCondition of a webhook called for
// rules: it keeps away the requests (group, resource, operation, each named
// in rules) on which rs has no work; nil, and no condition, when there are
// none. Wildcards and subresources are never kept away. idle lists the
// requests kept away, for the log.
func workCondition(rules []admissionregistrationv1.RuleWithOperations, mutating bool, rs RuleSet) (cond *admissionregistrationv1.MatchCondition, idle []string) {
	var skip []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, op := range r.Operations {
					if g == "*" || res == "*" || op == admissionregistrationv1.OperationAll || strings.Contains(res, "/") {
						continue
					}
					if rs.HasWork(mutating, schema.GroupResource{Group: g, Resource: res}, string(op)) {
						continue
					}
					idle = append(idle, fmt.Sprintf("%s %s.%s", op, res, g))
					skip = append(skip, fmt.Sprintf("(request.resource.group == '%s' && request.resource.resource == '%s' && request.operation == '%s')", g, res, op))
				}
			}
		}
	}
	if len(skip) == 0 {
		return nil, nil
	}
	slices.Sort(skip)
	slices.Sort(idle)
	return &admissionregistrationv1.MatchCondition{Name: WorkConditionName, Expression: "!(" + strings.Join(slices.Compact(skip), " || ") + ")"}, slices.Compact(idle)
}

// withCondition sets (want != nil) or removes shepherd's condition of
// name in conds, keeping every other, and reports whether conds changed.
func withCondition(conds *[]admissionregistrationv1.MatchCondition, name string, want *admissionregistrationv1.MatchCondition) bool {
	i := slices.IndexFunc(*conds, func(c admissionregistrationv1.MatchCondition) bool {
		return c.Name == name
	})
	switch {
	case want == nil && i < 0:
		return false
	case want == nil:
		*conds = slices.Delete(*conds, i, i+1)
		return true
	case i < 0:
		*conds = append(*conds, *want)
		return true
	case equality.Semantic.DeepEqual((*conds)[i], *want):
		return false
	default:
		(*conds)[i] = *want
		return true
	}
}

// Disabled is the rule set of --skip-unread-updates=false: it always asks
// for every UPDATE, so the keeper removes a condition an earlier run left.
var Disabled RuleSet = disabled{}

type disabled struct{}

func (disabled) Version() uint64 { return 0 }
func (disabled) UpdateReads() celrules.Reads {
	return celrules.Reads{Unconditional: "--skip-unread-updates=false"}
}
func (disabled) HasWork(bool, schema.GroupResource, string) bool { return true }
