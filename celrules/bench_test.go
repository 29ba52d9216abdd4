package celrules

import "testing"

// BenchmarkCompileBuiltins compiles and type-checks the whole built-in
// library from scratch (schemas parsed once per process, typed
// environments built anew each iteration). Target: at most 200 ms.
func BenchmarkCompileBuiltins(b *testing.B) {
	if _, err := LoadSchemas(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileBuiltins(); err != nil {
			b.Fatal(err)
		}
	}
}
