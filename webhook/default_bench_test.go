package webhook

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// benchmarkDefault runs the mutating half of the chain (decode, the
// defaults as in-process MutatingAdmissionPolicies, the patch) on an
// example manifest, against the pinned upstream schemas.
func benchmarkDefault(b *testing.B, file, group, version, kind string) {
	y, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(j, &m)
	s, err := celrules.PinnedSchemas()
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewChain(ChainOptions{Rules: celrules.Config{Schemas: s}})
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}, Namespace: "default", Name: "x", Object: j}
	if v := c.Default(context.Background(), req); !v.Allowed {
		b.Fatalf("%s is denied: %+v", file, v.Violations)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Default(context.Background(), req)
	}
}

// BenchmarkDefaultPodCliqueSet defaults examples/valid's Training
// PodCliqueSet, the object make bench-admission creates.
func BenchmarkDefaultPodCliqueSet(b *testing.B) {
	benchmarkDefault(b, "../examples/valid/podcliqueset-training.yaml", "grove.io", "v1alpha1", "PodCliqueSet")
}

// BenchmarkDefaultJobSet defaults examples/valid's JobSet, the object make
// bench-admission creates.
func BenchmarkDefaultJobSet(b *testing.B) {
	benchmarkDefault(b, "../examples/valid/jobset.yaml", "jobset.x-k8s.io", "v1alpha2", "JobSet")
}
