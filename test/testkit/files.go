package testkit

import (
	"os"
	"path/filepath"
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
