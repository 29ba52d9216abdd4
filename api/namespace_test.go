package api

import (
	"os"
	"path/filepath"
	"testing"
)

// OwnNamespace: $POD_NAMESPACE first, then the service account's
// namespace file, then DefaultNamespace.
func TestOwnNamespace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "namespace")
	defer func(was string) { serviceAccountNamespaceFile = was }(serviceAccountNamespaceFile)
	serviceAccountNamespaceFile = file

	t.Setenv("POD_NAMESPACE", "")
	if got := OwnNamespace(); got != DefaultNamespace {
		t.Errorf("no env, no file: %q, want %q", got, DefaultNamespace)
	}
	if err := os.WriteFile(file, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OwnNamespace(); got != DefaultNamespace {
		t.Errorf("empty file: %q, want %q", got, DefaultNamespace)
	}
	if err := os.WriteFile(file, []byte("from-sa\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OwnNamespace(); got != "from-sa" {
		t.Errorf("service account file: %q, want from-sa", got)
	}
	t.Setenv("POD_NAMESPACE", "from-env")
	if got := OwnNamespace(); got != "from-env" {
		t.Errorf("POD_NAMESPACE and the file: %q, want from-env", got)
	}
}
