package api

import (
	"os"
	"strings"
)

// serviceAccountNamespaceFile is where a pod finds its own namespace.
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OwnNamespace is the namespace shepherd runs in, the default of every
// namespace it keeps something in (the certificate Secret, the
// leader-election Lease): $POD_NAMESPACE (the Deployment sets it from the
// downward API; set it by hand out of a pod), else the namespace of the
// pod's service account, else DefaultNamespace.
func OwnNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return DefaultNamespace
}
