package app

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// manifest is one object read from a file, with where it came from.
type manifest struct {
	obj  *unstructured.Unstructured
	file string
	line int
}

func (m manifest) String() string { return fmt.Sprintf("%s:%d", m.file, m.line) }

// ParseError is a malformed manifest: the file, the line and what is wrong.
type ParseError struct {
	File string
	Line int
	Err  error
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// manifestFiles expands files and directories (recursively: *.yaml, *.yml,
// *.json) into a sorted list of files.
func manifestFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					found = append(found, path)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

var (
	docSeparator = regexp.MustCompile(`^---(\s.*)?$`)
	yamlLine     = regexp.MustCompile(`line (\d+)`)
)

// readManifests reads every object of the given files and directories.
// Multi-document YAML and JSON are accepted, and so are v1 Lists. A
// malformed document is a ParseError with the file and the absolute line.
func readManifests(paths []string) ([]manifest, error) {
	files, err := manifestFiles(paths)
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := parseManifests(f, b)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func parseManifests(file string, b []byte) ([]manifest, error) {
	var out []manifest
	lines := bytes.Split(b, []byte("\n"))
	start := 0
	flush := func(end int) error {
		doc := bytes.Join(lines[start:end], []byte("\n"))
		firstLine := start + 1
		if len(bytes.TrimSpace(doc)) == 0 {
			return nil
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return &ParseError{File: file, Line: firstLine + errLine(err) - 1, Err: cleanYAMLError(err)}
		}
		var m any
		if err := yaml.Unmarshal(js, &m); err != nil {
			return &ParseError{File: file, Line: firstLine, Err: err}
		}
		if m == nil {
			return nil
		}
		if _, ok := m.(map[string]any); !ok {
			return &ParseError{File: file, Line: firstLine, Err: fmt.Errorf("a manifest must be an object, got %T", m)}
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return &ParseError{File: file, Line: firstLine, Err: err}
		}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return &ParseError{File: file, Line: firstLine, Err: err}
			}
			for i := range l.Items {
				out = append(out, manifest{obj: &l.Items[i], file: file, line: firstLine})
			}
			return nil
		}
		out = append(out, manifest{obj: u, file: file, line: firstLine})
		return nil
	}
	for i, l := range lines {
		if docSeparator.Match(bytes.TrimRight(l, "\r")) {
			if err := flush(i); err != nil {
				return nil, err
			}
			start = i + 1
		}
	}
	if err := flush(len(lines)); err != nil {
		return nil, err
	}
	return out, nil
}

// errLine finds the 1-based line a YAML error names, or 1.
func errLine(err error) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n > 0 {
			return n
		}
	}
	return 1
}

func cleanYAMLError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = yamlLine.ReplaceAllString(msg, "")
	msg = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(msg, "yaml:")), ":"))
	return fmt.Errorf("invalid YAML: %s", msg)
}

// readPolicies reads WorkloadPolicy objects; other kinds are an error.
func readPolicies(paths []string) ([]*shepherdv1alpha1.WorkloadPolicy, error) {
	ms, err := readManifests(paths)
	if err != nil {
		return nil, err
	}
	var out []*shepherdv1alpha1.WorkloadPolicy
	for _, m := range ms {
		gvk := m.obj.GroupVersionKind()
		if gvk.GroupKind() != shepherdv1alpha1.GroupVersion.WithKind("WorkloadPolicy").GroupKind() {
			return nil, &ParseError{File: m.file, Line: m.line, Err: fmt.Errorf("--policy takes WorkloadPolicy objects (shepherd.dev/v1alpha1), got %s", gvk.Kind)}
		}
		var p shepherdv1alpha1.WorkloadPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m.obj.Object, &p, true); err != nil {
			return nil, &ParseError{File: m.file, Line: m.line, Err: fmt.Errorf("WorkloadPolicy %q: %w", m.obj.GetName(), err)}
		}
		out = append(out, &p)
	}
	return out, nil
}

// ruleConfigFlags are the flags that switch rules, shared by check and
// export.
type ruleConfigFlags struct {
	disabled []string
	crds     []string
}

// crdFlagUsage is --crd's help, shared by check and export.
const crdFlagUsage = "CRD file or directory of the target cluster to type-check rules against (repeatable); default: the pinned upstream CRDs built in (see `shepherd version`). Built-in rules whose fields these schemas lack are inactive; policies on such fields do not compile"

// config resolves the flags: the disabled rules and the schemas of --crd
// (the pinned upstream ones when none is given).
func (f *ruleConfigFlags) config() (celrules.Config, error) {
	cfg := celrules.Config{DisabledRules: f.disabled}
	var err error
	if len(f.crds) == 0 {
		cfg.Schemas, err = celrules.PinnedSchemas()
		return cfg, err
	}
	crds, err := pinned.Read(f.crds...)
	if err != nil {
		return cfg, usageError("--crd: %v", err)
	}
	cfg.Schemas, err = celrules.NewSchemas(crds, "--crd "+strings.Join(f.crds, ", "))
	return cfg, err
}
