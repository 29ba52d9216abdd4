package celrules

import "testing"

// BenchmarkCompileBuiltins compiles and type-checks the whole built-in
// library from scratch (schemas parsed once per process, typed
// environments built anew each iteration). Target: at most 200 ms.
func BenchmarkCompileBuiltins(b *testing.B) {
	s := seedSchemas(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := compileBuiltins(s); err != nil {
			b.Fatal(err)
		}
	}
}
