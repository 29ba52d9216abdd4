// Package corpus is the admission corpus: for every rule of docs/rules.md at
// least one allowed and one denied request (CREATE, and UPDATE for transition
// rules), each naming the rule it exercises and the expected verdict,
// violations, warnings and defaulted paths. Cases live in YAML files under
// cases/, one per kind. The unit test of this package replays them
// through webhook.Chain; ReplayAll replays them through a real kube-apiserver
// in each admission mode and CRD shape: shepherd's webhooks (test/webhook,
// test/interop), the native mode (test/native) and the exported policies
// alone (test/vap).
package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// WantViolation is one expected violation: its rule and field.
type WantViolation struct {
	Rule  string `json:"rule"`
	Field string `json:"field"`
}

// Case is one admission request and its expected answer.
type Case struct {
	// Name is unique across the corpus.
	Name string `json:"name"`
	// Rule is the rule the case exercises (V-TJ-1, D-PCS-2, ...).
	Rule string `json:"rule"`
	// Operation is CREATE (default) or UPDATE.
	Operation string `json:"operation,omitempty"`
	// Object is the request object before defaulting.
	Object *unstructured.Unstructured `json:"object"`
	// OldObject is the stored object (UPDATE), as stored: already defaulted.
	OldObject *unstructured.Unstructured `json:"oldObject,omitempty"`
	// Context are the other objects the lookups see (runtimes, TrainJobs,
	// parent PodCliqueSets).
	Context []*unstructured.Unstructured `json:"context,omitempty"`
	// NoWorkloadAPI makes the Workload API unserved (V-TR-7).
	NoWorkloadAPI bool `json:"noWorkloadAPI,omitempty"`
	// Config is the rule configuration the chain runs with.
	Config celrules.Config `json:"config,omitempty"`

	WantAllowed    bool            `json:"wantAllowed"`
	WantViolations []WantViolation `json:"wantViolations,omitempty"`
	// WantWarnings are substrings; each matches one admission warning, and
	// there are exactly as many warnings.
	WantWarnings []string `json:"wantWarnings,omitempty"`
	// WantPatchPaths are the JSON-pointer paths the defaulting patch
	// touches, exactly.
	WantPatchPaths []string `json:"wantPatchPaths,omitempty"`

	// File is the file the case was read from.
	File string `json:"-"`
}

// OperationOrDefault is the case's operation, CREATE when unset.
func (c *Case) OperationOrDefault() string {
	if c.Operation == "" {
		return "CREATE"
	}
	return c.Operation
}

type file struct {
	Cases []Case `json:"cases"`
}

// Dir is the corpus directory of this package.
func Dir() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(f), "cases")
}

// Load reads every *.yaml file of dir, sorted by file name.
func Load(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Case
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var cf file
		if err := yaml.UnmarshalStrict(b, &cf); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, c := range cf.Cases {
			c.File = filepath.Base(f)
			if c.Name == "" || c.Rule == "" || c.Object == nil {
				return nil, fmt.Errorf("%s: every case needs name, rule and object (case %q)", f, c.Name)
			}
			if prev, dup := seen[c.Name]; dup {
				return nil, fmt.Errorf("%s: case %q is also in %s", f, c.Name, prev)
			}
			if op := c.OperationOrDefault(); op != "CREATE" && op != "UPDATE" {
				return nil, fmt.Errorf("%s: case %q: operation must be CREATE or UPDATE", f, c.Name)
			}
			if (c.OperationOrDefault() == "UPDATE") != (c.OldObject != nil) {
				return nil, fmt.Errorf("%s: case %q: oldObject goes with operation UPDATE", f, c.Name)
			}
			seen[c.Name] = c.File
			out = append(out, c)
		}
	}
	return out, nil
}

// RuleFamily is the prefix of a rule ID without its number: V-PCS for
// V-PCS-4.
func RuleFamily(rule string) string {
	if i := strings.LastIndex(rule, "-"); i > 0 {
		return rule[:i]
	}
	return rule
}
