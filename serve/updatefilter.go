package serve

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/leader"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/updatefilter"
)

// updateFilterOptions is --skip-unread-updates and
// --skip-requests-without-work.
type updateFilterOptions struct {
	enabled bool
	work    bool
}

func (u *updateFilterOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&u.enabled, "skip-unread-updates", true,
		"Keep a matchCondition in shepherd's webhook configurations (--mutating-/--validating-webhook-configuration) so that an UPDATE reaches the webhooks only when it changes a part of the object some active rule reads "+
			"(the spec, labels, annotations, ownerReferences, and whatever WorkloadPolicies read): operators' finalizer and other metadata-only UPDATEs then cost no webhook call. "+
			"Derived from the active rules by the leader and re-derived when they change; no condition while a rule reads the request's user or the whole object. "+
			"It changes no verdict: each rule is evaluated on UPDATE only when the update changes what it reads, by shepherd, shepherd check and the exported policies alike (matchCondition "+celrules.UpdateConditionName+"). "+
			"Set false to send every UPDATE; any condition an earlier run left is then removed.")
	fs.BoolVar(&u.work, "skip-requests-without-work", true,
		"Keep a matchCondition ("+updatefilter.WorkConditionName+") in shepherd's webhook configurations so that the apiserver does not call a webhook for a kind and operation on which it has nothing to do: "+
			"no enabled defaulter (mutating), no active built-in rule, WorkloadPolicy or Go check (validating) — for example a TrainJob create where Trainer's CRD and webhook enforce every TrainJob rule (--defer-to-upstream). "+
			"Derived by the leader and re-derived when the rules, WorkloadPolicies, CRDs or upstream webhooks change. Set false to be called for every request the configurations name.")
}

// keptRules is what the keeper derives the conditions from, with each
// condition switched by its flag.
type keptRules struct {
	chain       *webhook.Chain
	reads, work bool
}

func (k keptRules) Version() uint64 { return k.chain.Version() }

func (k keptRules) UpdateReads() celrules.Reads {
	if !k.reads {
		return updatefilter.Disabled.UpdateReads()
	}
	return k.chain.UpdateReads()
}

func (k keptRules) HasWork(mutating bool, gr schema.GroupResource, op string) bool {
	return !k.work || k.chain.HasWork(mutating, gr, op)
}

// setupUpdateFilter has the leader of each term keep (or, when disabled,
// remove) the UPDATE matchCondition of shepherd's webhook configurations.
func setupUpdateFilter(o *Options, admission admissionChain, terms *leader.Terms) error {
	chain, ok := admission.(*webhook.Chain)
	if !ok {
		return fmt.Errorf("the admission chain %T cannot derive the UPDATE matchCondition", admission)
	}
	rules := keptRules{chain: chain, reads: o.updateFilter.enabled, work: o.updateFilter.work}
	terms.AddLeaderOnly(func(term manager.Manager) error {
		k := &updatefilter.Keeper{
			Client:     term.GetClient(),
			Reader:     term.GetAPIReader(),
			Rules:      rules,
			Mutating:   o.certs.MutatingWebhookName,
			Validating: o.certs.ValidatingWebhookName,
		}
		if err := term.Add(k); err != nil {
			return fmt.Errorf("adding the UPDATE matchCondition keeper: %w", err)
		}
		return nil
	})
	return nil
}
