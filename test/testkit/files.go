package testkit

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// WriteFile writes content to dir/name, making the directories name
// needs, and returns its path: a manifest, policy or suite file for a
// command or reader under test.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// EnvInt is the positive integer in the environment variable name, def
// when it is unset: a benchmark's size knob (ADMISSION_N=2000 make bench-admission).
func EnvInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
