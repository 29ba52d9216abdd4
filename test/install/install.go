// Package install builds the install variants of deploy/ with the Kustomize
// Go API, for the suites that check them (test/deploy) and install them
// beside the upstream operators' CRDs (test/interop).
package install

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// Dir is a directory under deploy/.
func Dir(parts ...string) string {
	return filepath.Join(append([]string{cluster.RepoRoot(), "deploy"}, parts...)...)
}

// Build runs `kustomize build dir`.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON, so numbers are int64/float64 as in any decoded
		// object (Map() keeps YAML's int, which DeepCopy rejects).
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build %s: decoding %s: %w", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	return out, nil
}

// Variants builds every installable variant: default, cert-manager, and
// default with the Prometheus component, the last through an overlay that
// Variants writes into scratch (Kustomize loads directories from anywhere,
// but only by relative path).
func Variants(scratch string) (map[string][]*unstructured.Unstructured, error) {
	rel := func(dir string) (string, error) { return filepath.Rel(scratch, dir) }
	def, err := rel(Dir("default"))
	if err != nil {
		return nil, err
	}
	prom, err := rel(Dir("prometheus"))
	if err != nil {
		return nil, err
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n", def, prom)
	if err := os.WriteFile(filepath.Join(scratch, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return nil, err
	}
	out := map[string][]*unstructured.Unstructured{}
	for name, dir := range map[string]string{"default": Dir("default"), "cert-manager": Dir("cert-manager"), "default+prometheus": scratch} {
		if out[name], err = Build(dir); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Find returns the objects of kind (and name, when not empty) among objs.
func Find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}
