package celrules

import (
	"fmt"
	"io/fs"
	"path"
	"sort"

	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/integrations"
)

// BuiltinRules parses the built-in library: the rule files each
// integration keeps beside it (integrations.Framework.Rules, rules/*.yaml,
// one per kind), in file-name then rule order.
func BuiltinRules() ([]Rule, error) {
	type file struct {
		name string
		body []byte
	}
	var files []file
	for _, f := range integrations.Frameworks {
		if f.Rules == nil {
			continue
		}
		names, err := fs.Glob(f.Rules, "rules/*.yaml")
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			b, err := fs.ReadFile(f.Rules, n)
			if err != nil {
				return nil, err
			}
			files = append(files, file{name: path.Base(n), body: b})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var out []Rule
	seen := map[string]string{}
	for _, f := range files {
		var rf ruleFile
		if err := yaml.UnmarshalStrict(f.body, &rf); err != nil {
			return nil, fmt.Errorf("built-in rules %s: %w", f.name, err)
		}
		for _, r := range rf.Rules {
			if prev, dup := seen[r.ID]; dup {
				return nil, fmt.Errorf("built-in rule %s is defined in both %s and %s", r.ID, prev, f.name)
			}
			seen[r.ID] = f.name
			out = append(out, r)
		}
	}
	return out, nil
}

type ruleFile struct {
	Rules []Rule `json:"rules"`
}

// CompileBuiltins compiles and type-checks the whole built-in library
// against s. A rule that does not type-check there is inactive: its fields
// are not in the schemas the target cluster serves (a seed field the
// upstream CRD lacks), so enforcing it would deny every object or nothing.
// inactive maps its ID to the reason; the library itself failing to parse
// is an error.
func CompileBuiltins(s *Schemas) (active []*compiledRule, inactive map[string]string, err error) {
	s.builtinsOnce.Do(func() { s.builtins, s.inactive, s.builtinsErr = compileBuiltins(s) })
	return s.builtins, s.inactive, s.builtinsErr
}

func compileBuiltins(s *Schemas) ([]*compiledRule, map[string]string, error) {
	rules, err := BuiltinRules()
	if err != nil {
		return nil, nil, err
	}
	out := make([]*compiledRule, 0, len(rules))
	inactive := map[string]string{}
	for _, r := range rules {
		if r, err = expandKnobs(r, s); err != nil {
			return nil, nil, err
		}
		cr, errs := compileRule(r, SourceBuiltin, environment.NewExpressions, s)
		if len(errs) > 0 {
			inactive[r.ID] = fmt.Sprintf("does not type-check against %s: %v", s.Source, errs.ToAggregate())
			continue
		}
		out = append(out, cr)
	}
	return out, inactive, nil
}
