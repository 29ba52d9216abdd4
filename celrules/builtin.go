package celrules

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"

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

// CompileBuiltins compiles and type-checks the whole built-in library. Any
// error names the rule and the expression.
func CompileBuiltins() ([]*compiledRule, error) {
	rules, err := BuiltinRules()
	if err != nil {
		return nil, err
	}
	s, err := LoadSchemas()
	if err != nil {
		return nil, err
	}
	tc := newTypeChecker(s)
	out := make([]*compiledRule, 0, len(rules))
	for _, r := range rules {
		cr, errs := compileRule(r, SourceBuiltin, environment.NewExpressions, tc)
		if len(errs) > 0 {
			return nil, fmt.Errorf("built-in rule %s: %w", r.ID, errs.ToAggregate())
		}
		out = append(out, cr)
	}
	return out, nil
}

var (
	builtinOnce     sync.Once
	builtinCompiled []*compiledRule
	builtinErr      error
)

// builtinRules compiles the library once per process: it never changes.
func builtinRules() ([]*compiledRule, error) {
	builtinOnce.Do(func() { builtinCompiled, builtinErr = CompileBuiltins() })
	return builtinCompiled, builtinErr
}
