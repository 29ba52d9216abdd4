package offline

import (
	"errors"
	"strings"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// ReadSchemas reads the schemas of the CRD files and directories paths (the
// manifests below a directory), named after them with prefix (the
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
// among those pinned.Read reads for path (the file, or the manifests
// below a directory, as Files finds them): pinned.Read reads each whole,
// unbounded. A CRD streamed from a pipe (--crd <(kubectl get crd ... -o
// yaml)) has no size to check and is read as before.
func checkCRDFileSizes(path string, limit int64) error {
	files, err := Files([]string{path})
	if err != nil {
		return nil // pinned.Read says what is wrong with it
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
