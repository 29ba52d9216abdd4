package webhook

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

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
	ids := make([]string, 0, len(rules)+len(goRules()))
	for _, r := range rules {
		ids = append(ids, r.ID)
	}
	for _, g := range goRules() {
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

// AddDisableRuleFlag registers --disable-rule, bound to ids, on fs, and
// --disable-rules, the spelling serve had before every command took
// --disable-rule, as a hidden deprecated alias. The alias shares the flag's
// value rather than only its variable: a string slice replaces its default on
// its first Set, so two values over one variable would let the second
// spelling drop the IDs the first collected.
func AddDisableRuleFlag(fs *pflag.FlagSet, ids *[]string, usage string) {
	fs.StringSliceVar(ids, "disable-rule", *ids, usage)
	alias := *fs.Lookup("disable-rule")
	alias.Name, alias.Usage = "disable-rules", "Deprecated spelling of --disable-rule."
	fs.AddFlag(&alias)
	_ = fs.MarkDeprecated("disable-rules", "use --disable-rule, which every command takes")
}
