package app

import (
	"fmt"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/updatefilter"
)

// updateFilterOptions is --skip-unread-updates.
type updateFilterOptions struct {
	enabled bool
}

func (u *updateFilterOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&u.enabled, "skip-unread-updates", true,
		"Keep a matchCondition in shepherd's webhook configurations (--mutating-/--validating-webhook-configuration) so that an UPDATE reaches the webhooks only when it changes a part of the object some active rule reads "+
			"(the spec, labels, annotations, ownerReferences, and whatever WorkloadPolicies read): operators' finalizer and other metadata-only UPDATEs then cost no webhook call. "+
			"Derived from the active rules by the leader and re-derived when they change; no condition while a rule reads the request's user or the whole object. "+
			"It changes no verdict: each rule is evaluated on UPDATE only when the update changes what it reads, by shepherd, `shepherd check` and the exported policies alike (matchCondition "+celrules.UpdateConditionName+"). "+
			"Set false to send every UPDATE; any condition an earlier run left is then removed.")
}

// setupUpdateFilter has the leader of each term keep (or, when disabled,
// remove) the UPDATE matchCondition of shepherd's webhook configurations.
func setupUpdateFilter(o *serveOptions, admission admissionChain, leader *leaderTerms) error {
	chain, ok := admission.(*webhook.Chain)
	if !ok {
		return fmt.Errorf("the admission chain %T cannot derive the UPDATE matchCondition", admission)
	}
	var rules updatefilter.RuleSet = chain.Engine()
	if !o.updateFilter.enabled {
		rules = updatefilter.Disabled
	}
	before := leader.leaderOnly
	leader.leaderOnly = func(term manager.Manager) error {
		if before != nil {
			if err := before(term); err != nil {
				return err
			}
		}
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
	}
	return nil
}
