package celrules

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// The benchmarks here are diagnostics (no targets): what matters is
// shepherd's overhead end to end through a real apiserver (test/perf).

// BenchmarkCompileBuiltins compiles and type-checks the whole built-in
// library from scratch (schemas parsed once per process).
func BenchmarkCompileBuiltins(b *testing.B) {
	s := seedSchemas(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := compileBuiltins(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvaluatePodCliqueSet evaluates every built-in rule on the
// example Training PodCliqueSet.
func BenchmarkEvaluatePodCliqueSet(b *testing.B) {
	raw, err := os.ReadFile("../examples/valid/podcliqueset-training.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		b.Fatal(err)
	}
	e, err := NewEngine(Config{Schemas: seedSchemas(b)})
	if err != nil {
		b.Fatal(err)
	}
	in := &Input{Operation: "CREATE", Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet", Resource: "podcliquesets", Namespace: "default", Name: "x", Object: obj}
	b.ReportAllocs()
	for b.Loop() {
		if res := e.Evaluate(context.Background(), in); len(res) != 0 {
			b.Fatalf("the example is not admitted: %+v", res)
		}
	}
}
