// Package pinned holds the CustomResourceDefinitions shepherd type-checks
// against when it has no cluster to ask: the upstream CRDs of the versions
// shepherd is tested with, embedded at build, and CRD files a user names.
//
// Trainer's and JobSet's CRDs are copied from the modules go.mod pins by
// `make pinned-crds` (never committed: they are those projects' files).
// Grove publishes no Go module the proxy serves, so its CRDs here are
// generated from ./grove/v1alpha1, which mirrors Grove's published API. shepherd never installs any of them: on a
// cluster, `serve` reads the schemas the apiserver serves instead.
package pinned

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// The upstream versions shepherd is built and tested against. go.mod pins
// the same module versions; TestVersionsMatchGoMod keeps them in step.
const (
	TrainerModule  = "github.com/kubeflow/trainer/v2"
	TrainerVersion = "v2.3.0"
	JobSetModule   = "sigs.k8s.io/jobset"
	JobSetVersion  = "v0.12.0"
	// GroveAPI names the Grove API the test CRD mirrors.
	GroveAPI = "ai-dynamo/grove operator/api/core/v1alpha1"
)

//go:embed crds
var embedded embed.FS

// groups whose CRDs must be in the embedded set: a binary built without
// `make pinned-crds` would otherwise type-check against nothing.
var required = []string{"trainer.kubeflow.org", "jobset.x-k8s.io", "grove.io"}

// CRDs returns the embedded upstream CRDs, sorted by name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	sub, err := fs.Sub(embedded, "crds")
	if err != nil {
		return nil, err
	}
	crds, err := readFS(sub, ".")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, c := range crds {
		have[c.Spec.Group] = true
	}
	for _, g := range required {
		if !have[g] {
			return nil, fmt.Errorf("this build has no pinned %s CRDs: build with `make build` (it runs `make pinned-crds`) or pass --crd", g)
		}
	}
	return crds, nil
}

// Read parses every CustomResourceDefinition in the given files and
// directories (*.yaml, *.yml, *.json; not recursive). Documents of other
// kinds are skipped, so a directory of mixed manifests works; a path with no
// CRD at all is an error naming it.
func Read(paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		var crds []*apiextensionsv1.CustomResourceDefinition
		if st.IsDir() {
			crds, err = readFS(os.DirFS(p), ".")
		} else {
			crds, err = readFile(os.DirFS(filepath.Dir(p)), filepath.Base(p))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(crds) == 0 {
			return nil, fmt.Errorf("%s holds no CustomResourceDefinition", p)
		}
		out = append(out, crds...)
	}
	return out, nil
}

func readFS(fsys fs.FS, dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
			continue
		}
		crds, err := readFile(fsys, filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, crds...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// readFile parses the CRDs of one file, which may hold several documents.
func readFile(fsys fs.FS, name string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*apiextensionsv1.CustomResourceDefinition
	for doc := 1; ; doc++ {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := dec.Decode(crd); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		out = append(out, crd)
	}
}
