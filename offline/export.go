package offline

import (
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// ExportVAPs is `shepherd export vap`: every exportable rule of chain as a
// ValidatingAdmissionPolicy and binding, rewritten for the exceptions in
// force at now, with Audit added to every binding's validationActions when
// audit is set; and the notes for standard error, one line each: the
// rules inactive on these schemas and those no ValidatingAdmissionPolicy
// can express, with why.
func ExportVAPs(chain *webhook.Chain, audit bool, now time.Time) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, []string) {
	vaps, bindings := chain.Engine().Export()
	exemptVAPs(chain.Exceptions(), vaps, now)
	if audit {
		for _, b := range bindings {
			b.Spec.ValidationActions = celrules.WithAudit(b.Spec.ValidationActions)
		}
	}
	var notes []string
	for _, r := range chain.Rules() {
		if r.Inactive != "" && r.Enabled {
			notes = append(notes, fmt.Sprintf("inactive: %s (%s): %s\n", r.ID, strings.Join(r.Kinds, ", "), r.Inactive))
			continue
		}
		if r.Enabled && (!r.Exportable || r.Action == "Default") {
			reason := r.Reason
			if r.Exportable {
				reason += "; `shepherd export map` writes it as a MutatingAdmissionPolicy"
			}
			notes = append(notes, fmt.Sprintf("not exported: %s (%s): %s\n", r.ID, strings.Join(r.Kinds, ", "), reason))
		}
	}
	return vaps, bindings, notes
}

// exemptVAPs rewrites the exported policies the exceptions in force at now
// name (exceptions.Set.ExemptVAP).
func exemptVAPs(set *exceptions.Set, vaps []*admissionregistrationv1.ValidatingAdmissionPolicy, now time.Time) {
	for _, v := range vaps {
		if rule := set.RuleOf(v.Name); rule != "" {
			set.ExemptVAP(rule, v, now)
		}
	}
}

// ExportMAPs is `shepherd export map`: the defaults of cfg as
// MutatingAdmissionPolicies and bindings (celrules.ExportDefaults),
// rewritten for the exceptions in force at now; and the notes for standard
// error: the defaulting rules no policy can express, then those this
// configuration and these schemas leave nothing to do, with why.
// WorkloadPolicies are only read to check the exceptions' rules.
func ExportMAPs(cfg celrules.Config, wps []*shepherdv1alpha1.WorkloadPolicy, excs []*shepherdv1alpha1.PolicyException, now time.Time) ([]*admissionregistrationv1.MutatingAdmissionPolicy, []*admissionregistrationv1.MutatingAdmissionPolicyBinding, []string, error) {
	policies, bindings, skipped, err := celrules.ExportDefaults(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := ExceptionSet(excs, wps)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range policies {
		if rule := set.RuleOf(p.Name); rule != "" {
			if _, err := set.ExemptMAP(rule, p, now); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: cfg})
	if err != nil {
		return nil, nil, nil, err
	}
	var notes []string
	for _, r := range chain.Rules() {
		if r.Action == "Default" && r.Enabled && !r.Exportable {
			notes = append(notes, fmt.Sprintf("not exported: %s (%s): %s\n", r.ID, strings.Join(r.Kinds, ", "), r.Reason))
		}
	}
	for _, n := range skipped {
		notes = append(notes, fmt.Sprintf("not exported: %s (%s): %s\n", n.ID, strings.Join(n.Kinds, ", "), n.Reason))
	}
	return policies, bindings, notes, nil
}
