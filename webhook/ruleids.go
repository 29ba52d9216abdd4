package webhook

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// BuiltinRuleIDs lists the ID of every built-in rule, sorted: the CEL
// rules of the rule library and the Go checks and defaulters — what
// `export rules` lists without WorkloadPolicies.
func BuiltinRuleIDs() ([]string, error) {
	rules, err := celrules.BuiltinRules()
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(rules)+len(goRules))
	for _, r := range rules {
		ids = append(ids, r.ID)
	}
	for _, g := range goRules {
		ids = append(ids, g.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// CheckRuleIDs reports an error naming flag when ids has an empty or
// unknown rule ID, listing the valid ones: a mistyped --disable-rule must
// not leave the rule the user meant to switch off running, silently.
func CheckRuleIDs(flag string, ids []string) error {
	known, err := BuiltinRuleIDs()
	if err != nil {
		return err
	}
	var unknown []string
	for _, id := range ids {
		if strings.TrimSpace(id) == "" {
			return fmt.Errorf("--%s has an empty rule ID", flag)
		}
		if !slices.Contains(known, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("--%s: unknown rule ID %s; the built-in rules are %s (shepherd export rules describes them)",
			flag, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return nil
}
