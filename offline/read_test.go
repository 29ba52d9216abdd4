package offline

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestParseRefusesWhatCannotBeJudged: a document that is not an object,
// whose apiVersion or kind is missing or not a string, or a List with an
// item like that, is a ParseError at the document's first line of
// content, saying which document or item and what to add; the hint names
// the kind's apiVersions or the group's kinds when there are a few.
func TestParseRefusesWhatCannotBeJudged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a sequence", "- a\n- b\n", "f:1: document 1: a Manifest must be an object, got []interface {}"},
		{"a scalar", "hello\n", "f:1: document 1: a Manifest must be an object, got string"},
		{"apiVersion not a string", "apiVersion: 5\nkind: TrainJob\n", "f:1: document 1: apiVersion must be a string, got 5"},
		{"kind not a string", "apiVersion: v1\nkind: [a]\n", "f:1: document 1: kind must be a string, got [a]"},
		{"neither", "metadata: {name: x}\n", "f:1: document 1 has neither apiVersion nor kind; add both, e.g. apiVersion: trainer.kubeflow.org/v1alpha1 and kind: TrainJob"},
		{"empty strings are absent", "apiVersion: ''\nkind: null\n", "f:1: document 1 has neither apiVersion nor kind; add both, e.g. apiVersion: trainer.kubeflow.org/v1alpha1 and kind: TrainJob"},
		{"a framework's kind", "kind: PodCliqueSet\n", "f:1: document 1 (kind PodCliqueSet) has no apiVersion; add apiVersion: grove.io/v1alpha1"},
		{"a kind of two versions", "kind: HorizontalPodAutoscaler\n", "f:1: document 1 (kind HorizontalPodAutoscaler) has no apiVersion; add apiVersion: autoscaling/v1 (or autoscaling/v2)"},
		{"an unknown kind", "kind: Widget\n", "f:1: document 1 (kind Widget) has no apiVersion; add apiVersion: GROUP/VERSION of the kind (e.g. trainer.kubeflow.org/v1alpha1 for a TrainJob)"},
		{"a group of one kind", "apiVersion: jobset.x-k8s.io/v1alpha2\n", "f:1: document 1 (apiVersion jobset.x-k8s.io/v1alpha2) has no kind; add kind: JobSet"},
		{"a group of three kinds", "apiVersion: grove.io/v1alpha1\n", "f:1: document 1 (apiVersion grove.io/v1alpha1) has no kind; add kind: one of PodClique, PodCliqueScalingGroup, PodCliqueSet"},
		{"a group of many kinds", "apiVersion: v1\n", "f:1: document 1 (apiVersion v1) has no kind; add kind: the object's kind (e.g. TrainJob)"},
		{"an unknown group", "apiVersion: example.com/v1\n", "f:1: document 1 (apiVersion example.com/v1) has no kind; add kind: the object's kind (e.g. TrainJob)"},
		// Empty documents are not counted; the line is that of the
		// content, after the separator, a comment and a blank line.
		{"the line of a later document", "---\n---\n# the job\n\nkind: TrainJob\n", "f:5: document 1 (kind TrainJob) has no apiVersion; add apiVersion: trainer.kubeflow.org/v1alpha1"},
		{"a List item not an object", "apiVersion: v1\nkind: List\nitems:\n- 3\n", "f:1: item 1 of the List in document 1 is not an object, got int64"},
		{"a List item without apiVersion", "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n- {kind: JobSet}\n", "f:4: item 2 of the List in document 2 (kind JobSet) has no apiVersion; add apiVersion: jobset.x-k8s.io/v1alpha2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ms, err := Parse("f", []byte(tc.in))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse = %d manifests, error %v; want a ParseError", len(ms), err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestErrorMessages: a ParseError without a line names the file alone; an
// input over --max-input-bytes names it, the limit as a quantity and the
// flag, and says what to split.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	inner := errors.New("bad")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"parse error with a line", &ParseError{File: "a.yaml", Line: 3, Err: inner}, "a.yaml:3: bad"},
		{"parse error without a line", &ParseError{File: "a.yaml", Err: inner}, "a.yaml: bad"},
		{"a file", &InputTooLargeError{Name: "big.yaml", Limit: 64 << 20}, "big.yaml: larger than the 64Mi (67108864 bytes) --max-input-bytes allows; raise --max-input-bytes or split the file"},
		// The limit is written as --max-input-bytes takes it: 1000 is 1k.
		{"standard input", &InputTooLargeError{Name: "standard input", Limit: 1000}, "standard input: larger than the 1k (1000 bytes) --max-input-bytes allows; raise --max-input-bytes or split the input"},
	} {
		if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if !errors.Is(&ParseError{File: "a.yaml", Err: inner}, inner) {
		t.Error("a ParseError does not unwrap to its cause")
	}
}

// failingReader fails every read.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

// TestReadManifests: a directory is read recursively, its *.yaml, *.yml
// and *.json (in any case) in path order, other files skipped; a file
// given by name is read whatever its name; "-" reads standard input,
// named <stdin>, where one is accepted; what cannot be read is an error
// naming it.
func TestReadManifests(t *testing.T) {
	t.Parallel()
	cm := func(name string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + "}\n" }
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	testkit.WriteFile(t, tree, "b.yaml", cm("b")+"---\n"+cm("b2"))
	const aJSON = `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}`
	testkit.WriteFile(t, tree, "a.json", aJSON)
	testkit.WriteFile(t, tree, "sub/c.YML", "# c\n"+cm("c"))
	testkit.WriteFile(t, tree, "d.yaml/e.yaml", cm("e")) // a directory named like a manifest
	testkit.WriteFile(t, tree, "notes.txt", "not: [yaml")
	testkit.WriteFile(t, tree, "f.yaml.bak", "not: [yaml")
	named := testkit.WriteFile(t, dir, "named.txt", cm("named"))
	empty := filepath.Join(dir, "empty")
	if err := os.MkdirAll(filepath.Join(empty, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, empty, "sub/README.md", "# none here")
	bad := testkit.WriteFile(t, dir, "bad/x.yaml", cm("x")+"---\nkind: TrainJob\n")

	list := func(ms []Manifest) []string {
		var out []string
		for _, m := range ms {
			out = append(out, strings.TrimPrefix(m.String(), dir+"/")+" "+m.Obj.GetName())
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		paths   []string
		stdin   io.Reader
		limit   int64
		want    []string
		wantErr string
	}{{
		name:  "a tree and a named file",
		paths: []string{tree, named},
		want:  []string{"tree/a.json:1 a", "tree/b.yaml:1 b", "tree/b.yaml:5 b2", "tree/d.yaml/e.yaml:1 e", "tree/sub/c.YML:2 c", "named.txt:1 named"},
	}, {
		name:  "standard input",
		paths: []string{"-"},
		stdin: strings.NewReader(cm("in")),
		want:  []string{"<stdin>:1 in"},
	}, {
		name:    "standard input where it is not accepted",
		paths:   []string{named, "-"},
		wantErr: `"-" (standard input) is not accepted here: give a file or directory`,
	}, {
		name:    "standard input that fails",
		paths:   []string{"-"},
		stdin:   failingReader{},
		wantErr: "reading standard input: boom",
	}, {
		name:    "standard input over the limit",
		paths:   []string{"-"},
		stdin:   onlyReader{strings.NewReader(cm("in"))},
		limit:   8,
		wantErr: "standard input: larger than the 8 bytes --max-input-bytes allows; raise --max-input-bytes or split the input",
	}, {
		name:  "a file over the limit in a tree",
		paths: []string{tree},
		// a.json is read; b.yaml, read next, is larger.
		limit:   int64(len(aJSON)),
		wantErr: filepath.Join(tree, "b.yaml") + ": larger than the " + strconv.Itoa(len(aJSON)) + " bytes --max-input-bytes allows; raise --max-input-bytes or split the file",
	}, {
		name:    "a directory without manifests",
		paths:   []string{tree, empty},
		wantErr: "no manifests (*.yaml, *.yml, *.json) found in " + empty,
	}, {
		name:    "a malformed file in a directory",
		paths:   []string{filepath.Dir(bad)},
		wantErr: bad + ":5: document 2 (kind TrainJob) has no apiVersion; add apiVersion: trainer.kubeflow.org/v1alpha1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			limit := tc.limit
			if limit == 0 {
				limit = 1 << 20
			}
			ms, err := ReadManifests(tc.paths, tc.stdin, limit)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("read %v, want error %q", list(ms), tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, list(ms)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ReadManifests([]string{filepath.Join(dir, "nope.yaml")}, nil, 1<<20); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestReadPolicies: --policy reads shepherd.dev's WorkloadPolicies and
// PolicyExceptions, strictly; any other kind (of another group too) or an
// unknown field is an error at the file and line naming it.
func TestReadPolicies(t *testing.T) {
	t.Parallel()
	const policy = "apiVersion: shepherd.dev/v1alpha1\nkind: WorkloadPolicy\nmetadata: {name: team}\nspec:\n  match: {resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]}\n  validations: [{expression: 'true'}]\n"
	const exception = "apiVersion: shepherd.dev/v1alpha1\nkind: PolicyException\nmetadata: {name: legacy, namespace: ml}\nspec: {rules: [team], reason: old}\n"
	for _, tc := range []struct {
		name, content string
		wantPolicies  []string
		wantExcs      []string
		wantErr       []string
	}{{
		name:         "policies and exceptions",
		content:      policy + "---\n" + exception + "---\n" + strings.Replace(policy, "name: team", "name: other", 1),
		wantPolicies: []string{"team", "other"},
		wantExcs:     []string{"ml/legacy"},
	}, {
		name:    "another kind",
		content: policy + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		wantErr: []string{"p.yaml:8: --policy takes WorkloadPolicy and PolicyException objects (shepherd.dev/v1alpha1), got ConfigMap"},
	}, {
		name:    "a WorkloadPolicy of another group",
		content: strings.Replace(policy, "shepherd.dev/v1alpha1", "example.com/v1", 1),
		wantErr: []string{"p.yaml:1: --policy takes WorkloadPolicy and PolicyException objects (shepherd.dev/v1alpha1), got WorkloadPolicy"},
	}, {
		name:    "an unknown field",
		content: exception + "---\n" + policy + "  bogus: 1\n",
		wantErr: []string{`p.yaml:6: WorkloadPolicy "team": `, "unknown field", "spec.bogus"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := testkit.WriteFile(t, t.TempDir(), "p.yaml", tc.content)
			ps, excs, err := ReadPolicies([]string{f}, nil, 1<<20)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("read %d policies, %d exceptions; want an error", len(ps), len(excs))
				}
				msg := strings.ReplaceAll(err.Error(), filepath.Dir(f)+"/", "")
				for _, w := range tc.wantErr {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q lacks %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gotPolicies, gotExcs []string
			for _, p := range ps {
				gotPolicies = append(gotPolicies, p.Name)
			}
			for _, e := range excs {
				gotExcs = append(gotExcs, e.Namespace+"/"+e.Name)
			}
			if diff := cmp.Diff(tc.wantPolicies, gotPolicies); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantExcs, gotExcs); diff != "" {
				t.Errorf("exceptions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckCRDFileSizes: --crd refuses, by its size, a regular file over
// the limit among those pinned.Read would read (the file given, or the
// *.yaml, *.yml and *.json below a directory, in any case); files it would
// not read, and paths it reports itself, pass.
func TestCheckCRDFileSizes(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("#", 100)
	for _, tc := range []struct {
		name  string
		files map[string]string
		path  string // relative to the test's directory
		want  string // the file named, relative; "" for no error
	}{
		{"a file", map[string]string{"crd.yaml": big}, "crd.yaml", "crd.yaml"},
		{"a file of any name", map[string]string{"crd.txt": big}, "crd.txt", "crd.txt"},
		{"a file within the limit", map[string]string{"crd.yaml": big[:10]}, "crd.yaml", ""},
		{"in a directory", map[string]string{"d/a.yaml": "#", "d/b.json": big}, "d", "d/b.json"},
		{"a .yml in a directory", map[string]string{"d/b.yml": big}, "d", "d/b.yml"},
		{"another extension in a directory", map[string]string{"d/a.yaml": "#", "d/b.txt": big}, "d", ""},
		{"a subdirectory", map[string]string{"d/a.yaml": "#", "d/sub/b.yaml": big}, "d", "d/sub/b.yaml"},
		{"an upper-case extension", map[string]string{"d/B.YAML": big}, "d", "d/B.YAML"},
		{"a missing path", nil, "nope", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, content := range tc.files {
				testkit.WriteFile(t, dir, name, content)
			}
			err := checkCRDFileSizes(filepath.Join(dir, tc.path), 10)
			if tc.want == "" {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			var tl *InputTooLargeError
			if !errors.As(err, &tl) {
				t.Fatalf("error %v, want an InputTooLargeError", err)
			}
			if diff := cmp.Diff(filepath.Join(dir, tc.want), tl.Name); diff != "" {
				t.Errorf("the file named (-want +got):\n%s", diff)
			}
		})
	}
}
