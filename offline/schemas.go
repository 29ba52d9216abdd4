package offline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// ReadSchemas reads the schemas of the CRD files and directories paths (a
// directory's *.yaml, *.yml and *.json), named after them with prefix (the
// flag that gave them). A regular file larger than limit is refused before
// it is read.
func ReadSchemas(paths []string, limit int64, prefix string) (*celrules.Schemas, error) {
	for _, p := range paths {
		if err := checkCRDFileSizes(p, limit); err != nil {
			return nil, err
		}
	}
	crds, err := pinned.Read(paths...)
	if err != nil {
		return nil, err
	}
	return celrules.NewSchemas(crds, prefix+strings.Join(paths, ", "))
}

// checkCRDFileSizes refuses, by its size, a regular file larger than limit
// among those pinned.Read reads for path (the file, or a directory's
// *.yaml, *.yml and *.json, not recursively): pinned.Read reads each
// whole, unbounded. A CRD streamed from a pipe (--crd <(kubectl get crd
// ... -o yaml)) has no size to check and is read as before.
func checkCRDFileSizes(path string, limit int64) error {
	info, err := os.Stat(path)
	if err != nil {
		return nil // pinned.Read says what is wrong with it
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil
		}
		files = files[:0]
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
				files = append(files, filepath.Join(path, name))
			}
		}
	}
	for _, f := range files {
		if _, err := CheckFileSize(f, limit); err != nil {
			var tooLarge *InputTooLargeError
			if errors.As(err, &tooLarge) {
				return err
			}
		}
	}
	return nil
}
