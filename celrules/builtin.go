package celrules

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// The built-in library: one YAML file per rule family under rules/, each a
// list of rules in the WorkloadPolicy format plus an id.
//
//go:embed rules/*.yaml
var builtinFS embed.FS

type ruleFile struct {
	Rules []Rule `json:"rules"`
}

// BuiltinRules parses the embedded library, in file then rule order.
func BuiltinRules() ([]Rule, error) {
	files, err := fs.Glob(builtinFS, "rules/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Rule
	seen := map[string]string{}
	for _, f := range files {
		b, err := builtinFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rf ruleFile
		if err := yaml.UnmarshalStrict(b, &rf); err != nil {
			return nil, fmt.Errorf("built-in rules %s: %w", path.Base(f), err)
		}
		for _, r := range rf.Rules {
			if prev, dup := seen[r.ID]; dup {
				return nil, fmt.Errorf("built-in rule %s is defined in both %s and %s", r.ID, prev, path.Base(f))
			}
			seen[r.ID] = path.Base(f)
			out = append(out, r)
		}
	}
	return out, nil
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
