package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api/install"
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
	return readManifestsFrom(paths, nil)
}

// stdinPath is the path that reads standard input, as kubectl's -f -.
const stdinPath = "-"

// stdinName names standard input in messages, in place of a file name.
const stdinName = "<stdin>"

// readManifestsFrom is readManifests where the path "-" reads stdin (nil:
// "-" is refused).
func readManifestsFrom(paths []string, stdin io.Reader) ([]manifest, error) {
	var out []manifest
	for _, p := range paths {
		if p == stdinPath {
			if stdin == nil {
				return nil, fmt.Errorf("%q (standard input) is not accepted here: give a file or directory", stdinPath)
			}
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading standard input: %w", err)
			}
			objs, err := parseManifests(stdinName, b)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		files, err := manifestFiles([]string{p})
		if err != nil {
			return nil, err
		}
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
	}
	return out, nil
}

func parseManifests(file string, b []byte) ([]manifest, error) {
	var out []manifest
	lines := bytes.Split(b, []byte("\n"))
	start, doc := 0, 0
	flush := func(end int) error {
		text := bytes.Join(lines[start:end], []byte("\n"))
		firstLine := start + 1
		if len(bytes.TrimSpace(text)) == 0 {
			return nil
		}
		js, err := yaml.YAMLToJSON(text)
		if err != nil {
			return &ParseError{File: file, Line: firstLine + errLine(err) - 1, Err: cleanYAMLError(err)}
		}
		var m any
		if err := yaml.Unmarshal(js, &m); err != nil {
			return &ParseError{File: file, Line: firstLine, Err: err}
		}
		if m == nil {
			return nil // only comments
		}
		doc++
		// Point at the document's first line of content, not at the
		// comments or blank lines before it.
		line := firstLine + contentOffset(lines[start:end])
		obj, ok := m.(map[string]any)
		if !ok {
			return &ParseError{File: file, Line: line, Err: fmt.Errorf("document %d: a manifest must be an object, got %T", doc, m)}
		}
		if err := checkTypeMeta(obj, fmt.Sprintf("document %d", doc)); err != nil {
			return &ParseError{File: file, Line: line, Err: err}
		}
		if items, isList := obj["items"].([]any); isList {
			for i, it := range items {
				item, ok := it.(map[string]any)
				if !ok {
					return &ParseError{File: file, Line: line, Err: fmt.Errorf("item %d of the %s in document %d is not an object, got %T", i+1, obj["kind"], doc, it)}
				}
				if err := checkTypeMeta(item, fmt.Sprintf("item %d of the %s in document %d", i+1, obj["kind"], doc)); err != nil {
					return &ParseError{File: file, Line: line, Err: err}
				}
			}
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return &ParseError{File: file, Line: line, Err: err}
		}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return &ParseError{File: file, Line: line, Err: err}
			}
			for i := range l.Items {
				out = append(out, manifest{obj: &l.Items[i], file: file, line: line})
			}
			return nil
		}
		out = append(out, manifest{obj: u, file: file, line: line})
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

// contentOffset is the index of the first line that is neither blank nor
// a comment.
func contentOffset(lines [][]byte) int {
	for i, l := range lines {
		t := bytes.TrimSpace(l)
		if len(t) > 0 && t[0] != '#' {
			return i
		}
	}
	return 0
}

// checkTypeMeta refuses an object without apiVersion or kind, saying what
// to add: the apiserver refuses such an object too, and without them
// nothing could judge it (no rule matches an object of no kind).
func checkTypeMeta(obj map[string]any, what string) error {
	apiVersion, vErr := typeMetaField(obj, "apiVersion")
	kind, kErr := typeMetaField(obj, "kind")
	switch {
	case vErr != nil:
		return fmt.Errorf("%s: %w", what, vErr)
	case kErr != nil:
		return fmt.Errorf("%s: %w", what, kErr)
	case apiVersion == "" && kind == "":
		return fmt.Errorf("%s has neither apiVersion nor kind; add both, e.g. apiVersion: trainer.kubeflow.org/v1alpha1 and kind: TrainJob", what)
	case apiVersion == "":
		return fmt.Errorf("%s (kind %s) has no apiVersion; add %s", what, kind, apiVersionHint(kind))
	case kind == "":
		return fmt.Errorf("%s (apiVersion %s) has no kind; add %s", what, apiVersion, kindHint(apiVersion))
	}
	return nil
}

// typeMetaField reads apiVersion or kind: "" when absent, null or empty;
// an error when it is not a string.
func typeMetaField(obj map[string]any, key string) (string, error) {
	switch v := obj[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("%s must be a string, got %v", key, v)
	}
}

// knownKinds indexes the kinds shepherd's scheme knows (the built-in
// Kubernetes types and those of api/), for the hints of checkTypeMeta.
var knownKinds = sync.OnceValues(func() (byKind map[string][]string, byGroupVersion map[string][]string) {
	byKind, byGroupVersion = map[string][]string{}, map[string][]string{}
	for gvk, t := range install.NewScheme().AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") ||
			t.PkgPath() == reflect.TypeFor[metav1.Status]().PkgPath() {
			continue // internal versions, lists, and metav1's options and status kinds
		}
		av := gvk.GroupVersion().String()
		byKind[gvk.Kind] = append(byKind[gvk.Kind], av)
		byGroupVersion[av] = append(byGroupVersion[av], gvk.Kind)
	}
	for _, l := range byKind {
		sort.Strings(l)
	}
	for _, l := range byGroupVersion {
		sort.Strings(l)
	}
	return byKind, byGroupVersion
})

// maxHints is how many alternatives a hint lists at most.
const maxHints = 5

func apiVersionHint(kind string) string {
	byKind, _ := knownKinds()
	switch avs := byKind[kind]; {
	case len(avs) == 1:
		return "apiVersion: " + avs[0]
	case len(avs) > 1 && len(avs) <= maxHints:
		return "apiVersion: " + avs[0] + " (or " + strings.Join(avs[1:], ", ") + ")"
	}
	return "apiVersion: GROUP/VERSION of the kind (e.g. trainer.kubeflow.org/v1alpha1 for a TrainJob)"
}

func kindHint(apiVersion string) string {
	_, byGV := knownKinds()
	if kinds := byGV[apiVersion]; len(kinds) > 0 && len(kinds) <= maxHints {
		if len(kinds) == 1 {
			return "kind: " + kinds[0]
		}
		return "kind: one of " + strings.Join(kinds, ", ")
	}
	return "kind: the object's kind (e.g. TrainJob)"
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
	return readPoliciesFrom(paths, nil)
}

// readPoliciesFrom is readPolicies where the path "-" reads stdin.
func readPoliciesFrom(paths []string, stdin io.Reader) ([]*shepherdv1alpha1.WorkloadPolicy, error) {
	ms, err := readManifestsFrom(paths, stdin)
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
	// kubeconfig (export only): type-check against the CRDs the cluster
	// of this kubeconfig serves instead.
	kubeconfig string
}

// crdFlagUsage is --crd's help, shared by check and export.
const crdFlagUsage = "CRD file or directory of the target cluster to type-check rules against (repeatable); default: the pinned upstream CRDs built in (see `shepherd version`). Built-in rules whose fields these schemas lack are inactive; policies on such fields do not compile"

// config resolves the flags: the disabled rules and the schemas of --crd
// (the pinned upstream ones when none is given).
func (f *ruleConfigFlags) config() (celrules.Config, error) {
	cfg := celrules.Config{DisabledRules: f.disabled}
	var err error
	if f.kubeconfig != "" {
		if len(f.crds) > 0 {
			return cfg, usageError("give --crd or --kubeconfig, not both: both name the schemas to type-check against")
		}
		c, restCfg, err := clusterClient(f.kubeconfig, 30*time.Second)
		if err != nil {
			return cfg, &ExitError{Code: 2, Err: fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)}
		}
		cfg.Schemas, _, err = servedSchemas(context.Background(), c, restCfg.Host)
		return cfg, err
	}
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
