// Package examples_test checks the example manifests themselves, without
// a cluster (test/interop, test/foundation and test/native run them against
// an apiserver).
package examples_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// overcommittable are the resources a container may request without a
// limit. Every other one — nvidia.com/gpu and any extended resource,
// hugepages — needs limits equal to requests, or the apiserver rejects the
// pod template: the Job the JobSet controller creates for a TrainJob fails
// JobCreationFailed, forever, although the TrainJob was admitted.
var overcommittable = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourceEphemeralStorage: true,
}

// TestValidExamplesLimitExtendedResources: in every example of
// examples/valid, every container's resources (and a TrainJob's
// resourcesPerNode, which Trainer gives its node containers) set limits
// equal to requests for each resource that cannot be overcommitted.
func TestValidExamplesLimitExtendedResources(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("valid", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in valid/: %v", err)
	}
	checked := 0
	for _, file := range files {
		for i, obj := range decode(t, file) {
			walk(obj, "", func(path string, r map[string]any) {
				checked++
				var rr corev1.ResourceRequirements
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r, &rr); err != nil {
					t.Errorf("%s, document %d, %s: %v", file, i+1, path, err)
					return
				}
				for _, msg := range unlimited(rr) {
					t.Errorf("%s, document %d, %s: %s", file, i+1, path, msg)
				}
			})
		}
	}
	// The GPU TrainJob at least: a walk that finds nothing checks nothing.
	if checked == 0 {
		t.Fatal("no container resources found in examples/valid: the walk lost them")
	}
}

// unlimited lists the resources of rr that cannot be overcommitted and
// lack a limit equal to their request.
func unlimited(rr corev1.ResourceRequirements) []string {
	var out []string
	for name, req := range rr.Requests {
		if overcommittable[name] {
			continue
		}
		switch lim, ok := rr.Limits[name]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s requested (%s) without a limit", name, req.String()))
		case lim.Cmp(req) != 0:
			out = append(out, fmt.Sprintf("%s limit %s differs from its request %s", name, lim.String(), req.String()))
		}
	}
	return out
}

// walk calls fn with every container's resources in o (any list named
// containers, initContainers or ephemeralContainers, at any depth: pod
// templates of JobSets, runtimes, PodCliqueSets, PodCliques) and every
// TrainJob-style resourcesPerNode.
func walk(o any, path string, fn func(path string, resources map[string]any)) {
	switch v := o.(type) {
	case map[string]any:
		for k, child := range v {
			p := path + "." + k
			switch k {
			case "containers", "initContainers", "ephemeralContainers":
				list, _ := child.([]any)
				for i, c := range list {
					cm, _ := c.(map[string]any)
					if r, ok := cm["resources"].(map[string]any); ok {
						fn(fmt.Sprintf("%s[%d].resources", p, i), r)
					}
				}
			case "resourcesPerNode":
				if r, ok := child.(map[string]any); ok {
					fn(p, r)
				}
			}
			walk(child, p, fn)
		}
	case []any:
		for i, child := range v {
			walk(child, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}

func decode(t *testing.T, file string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []map[string]any
	for {
		var obj map[string]any
		if err := d.Decode(&obj); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(obj) > 0 {
			out = append(out, obj)
		}
	}
}

// The check itself.
func TestUnlimited(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		name string
		rr   corev1.ResourceRequirements
		want string
	}{
		{"cpu and memory need no limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": q("2"), "memory": q("1Gi"), "ephemeral-storage": q("1Gi")}}, ""},
		{"gpu without a limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q("4")}}, "nvidia.com/gpu requested (4) without a limit"},
		{"gpu limit differs", corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q("4")}, Limits: corev1.ResourceList{"nvidia.com/gpu": q("8")}}, "limit 8 differs"},
		{"gpu limit equal", corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q("4")}, Limits: corev1.ResourceList{"nvidia.com/gpu": q("4")}}, ""},
		{"hugepages without a limit", corev1.ResourceRequirements{Requests: corev1.ResourceList{"hugepages-2Mi": q("1Gi")}}, "hugepages-2Mi requested"},
	} {
		got := strings.Join(unlimited(tc.rr), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
