package app

import (
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/policies"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// admissionChain is what serve needs of the chain: admission, and a policy
// store for the WorkloadPolicy hot reload.
type admissionChain interface {
	webhook.Admitter
	policies.Sink
}

// newChain builds the admission chain over the manager's cached lookups.
func newChain(mgr ctrl.Manager, probe *server.WorkloadAPIProbe, rules celrules.Config) (admissionChain, error) {
	chain, err := webhook.NewChain(webhook.ChainOptions{
		Lookups: webhook.NewClientLookups(mgr.GetClient(), probe.Served),
		Rules:   rules,
	})
	if err != nil {
		return nil, fmt.Errorf("building the admission chain: %w", err)
	}
	return chain, nil
}

// setupPolicyReload starts the WorkloadPolicy hot reload into chain and
// makes /readyz wait for every policy to be compiled.
func setupPolicyReload(mgr ctrl.Manager, chain admissionChain) error {
	r, err := policies.Setup(mgr, chain, clock.RealClock{})
	if err != nil {
		return err
	}
	return mgr.AddReadyzCheck("policies", r.ReadyChecker)
}
