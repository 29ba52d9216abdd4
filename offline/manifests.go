package offline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api/install"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// Manifest is one object read from a file, with where it came from.
type Manifest struct {
	Obj  *unstructured.Unstructured
	File string
	Line int
}

func (m Manifest) String() string { return fmt.Sprintf("%s:%d", m.File, m.Line) }

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

// Files expands files and directories (recursively: *.yaml, *.yml,
// *.json) into a sorted list of files. A directory without such a file is
// an error: checking nothing and exiting 0 would pass a CI job pointed at
// the wrong directory.
func Files(paths []string) ([]string, error) {
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
			if !d.IsDir() && pinned.IsManifest(path) {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("no manifests (*.yaml, *.yml, *.json) found in %s", p)
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

// StdinPath is the path that reads standard input, as kubectl's -f -.
const StdinPath = "-"

// stdinName names standard input in messages, in place of a file name.
const stdinName = "<stdin>"

// ReadManifests reads every object of the given files and
// directories; the path "-" reads stdin (nil: "-" is refused).
// Multi-document YAML and JSON are accepted, and so are v1 Lists. A
// malformed document is a ParseError with the file and the absolute line.
// A file or stream larger than limit bytes is an *InputTooLargeError
// (--max-input-bytes), found before it is parsed.
func ReadManifests(paths []string, stdin io.Reader, limit int64) ([]Manifest, error) {
	var out []Manifest
	for _, p := range paths {
		if p == StdinPath {
			if stdin == nil {
				return nil, fmt.Errorf("%q (standard input) is not accepted here: give a file or directory", StdinPath)
			}
			b, err := ReadLimited(stdin, stdinDescription, limit)
			if err != nil {
				if errors.As(err, new(*InputTooLargeError)) {
					return nil, err
				}
				return nil, fmt.Errorf("reading standard input: %w", err)
			}
			objs, err := Parse(stdinName, b)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		files, err := Files([]string{p})
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			b, err := ReadFileLimited(f, limit)
			if err != nil {
				return nil, err
			}
			objs, err := Parse(f, b)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
	}
	return out, nil
}

// Parse parses the documents of b, the contents of file. Each
// document is parsed from a subslice of b, and its object is decoded once
// and kept: splitting b into lines, joining them again per document and
// decoding each object twice held several copies of the input at once (a
// 50 MB file took 566 MB).
func Parse(file string, b []byte) ([]Manifest, error) {
	var out []Manifest
	doc := 0
	// flush parses text, a document whose first line is firstLine.
	flush := func(text []byte, firstLine int) error {
		if len(bytes.TrimSpace(text)) == 0 {
			return nil
		}
		js, err := yaml.YAMLToJSON(text)
		if err != nil {
			return &ParseError{File: file, Line: firstLine + errLine(err) - 1, Err: cleanYAMLError(err)}
		}
		// As Unstructured's own decoding (integers stay int64), so the
		// result is the object, not a copy to decode again.
		var m any
		if err := utiljson.Unmarshal(js, &m); err != nil {
			return &ParseError{File: file, Line: firstLine, Err: err}
		}
		if m == nil {
			return nil // only comments
		}
		doc++
		// Point at the document's first line of content, not at the
		// comments or blank lines before it.
		line := firstLine + contentOffset(text)
		obj, ok := m.(map[string]any)
		if !ok {
			return &ParseError{File: file, Line: line, Err: fmt.Errorf("document %d: a Manifest must be an object, got %T", doc, m)}
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
		// checkTypeMeta made sure of a kind: what Unstructured's decoding
		// would check.
		u := &unstructured.Unstructured{Object: obj}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return &ParseError{File: file, Line: line, Err: err}
			}
			for i := range l.Items {
				out = append(out, Manifest{Obj: &l.Items[i], File: file, Line: line})
			}
			return nil
		}
		out = append(out, Manifest{Obj: u, File: file, Line: line})
		return nil
	}
	// Walk the lines: a document runs from start (its first line,
	// startLine) to the newline before the next separator line.
	start, startLine := 0, 1
	for off, line := 0, 1; off <= len(b); line++ {
		l, next := b[off:], len(b)+1
		if i := bytes.IndexByte(l, '\n'); i >= 0 {
			l, next = l[:i], off+i+1
		}
		if isDocSeparator(l) {
			if err := flush(b[start:max(start, off-1)], startLine); err != nil {
				return nil, err
			}
			start, startLine = min(next, len(b)), line+1
		}
		off = next
	}
	if err := flush(b[start:], startLine); err != nil {
		return nil, err
	}
	return out, nil
}

// isDocSeparator reports whether line (without its newline) separates YAML
// documents: "---", alone or followed by a space and anything.
func isDocSeparator(line []byte) bool {
	// The prefix test spares the regular expression almost every line.
	return bytes.HasPrefix(line, []byte("---")) && docSeparator.Match(bytes.TrimRight(line, "\r"))
}

// contentOffset is the index of the first line of text that is neither
// blank nor a comment.
func contentOffset(text []byte) int {
	for i := 0; len(text) > 0; i++ {
		l := text
		if j := bytes.IndexByte(text, '\n'); j >= 0 {
			l, text = text[:j], text[j+1:]
		} else {
			text = nil
		}
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
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
	add := func(av, kind string) {
		if !slices.Contains(byKind[kind], av) {
			byKind[kind] = append(byKind[kind], av)
			byGroupVersion[av] = append(byGroupVersion[av], kind)
		}
	}
	for gvk, t := range install.NewScheme().AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") ||
			t.PkgPath() == reflect.TypeFor[metav1.Status]().PkgPath() {
			continue // internal versions, lists, and metav1's options and status kinds
		}
		add(gvk.GroupVersion().String(), gvk.Kind)
	}
	// The frameworks' kinds, also those shepherd reads as served, without
	// a Go type (Trainer's runtimes).
	for _, f := range integrations.Frameworks {
		for _, k := range f.Kinds {
			add(f.Group+"/"+f.Version, k)
		}
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

// ReadPolicies reads WorkloadPolicy and PolicyException objects as
// ReadManifests reads manifests; other kinds are an error.
func ReadPolicies(paths []string, stdin io.Reader, limit int64) ([]*shepherdv1alpha1.WorkloadPolicy, []*shepherdv1alpha1.PolicyException, error) {
	ms, err := ReadManifests(paths, stdin, limit)
	if err != nil {
		return nil, nil, err
	}
	var out []*shepherdv1alpha1.WorkloadPolicy
	var excs []*shepherdv1alpha1.PolicyException
	for _, m := range ms {
		gvk := m.Obj.GroupVersionKind()
		var into any
		switch gvk.GroupKind() {
		case shepherdv1alpha1.GroupVersion.WithKind("WorkloadPolicy").GroupKind():
			p := &shepherdv1alpha1.WorkloadPolicy{}
			out, into = append(out, p), p
		case shepherdv1alpha1.GroupVersion.WithKind(exceptions.Kind).GroupKind():
			e := &shepherdv1alpha1.PolicyException{}
			excs, into = append(excs, e), e
		default:
			return nil, nil, &ParseError{File: m.File, Line: m.Line, Err: fmt.Errorf("--policy takes WorkloadPolicy and PolicyException objects (shepherd.dev/v1alpha1), got %s", gvk.Kind)}
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m.Obj.Object, into, true); err != nil {
			return nil, nil, &ParseError{File: m.File, Line: m.Line, Err: fmt.Errorf("%s %q: %w", gvk.Kind, m.Obj.GetName(), err)}
		}
	}
	return out, excs, nil
}
