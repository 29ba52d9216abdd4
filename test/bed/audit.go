package bed

import (
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// Write is one write the apiserver's audit log recorded.
type Write = cluster.AuditEvent

// Writes returns the completed writes to the named object of resource in
// namespace ns — any subresource — oldest first. An empty name matches
// every object of resource in ns.
func (b *Bed) Writes(resource, ns, name string) ([]Write, error) {
	return b.requests(resource, ns, name, func(verb string) bool { return verb != "get" })
}

// Gets returns the completed GETs of the named object of resource in
// namespace ns, for the kinds shepherd reads as served (auditPolicy).
func (b *Bed) Gets(resource, ns, name string) ([]Write, error) {
	return b.requests(resource, ns, name, func(verb string) bool { return verb == "get" })
}

func (b *Bed) requests(resource, ns, name string, verb func(string) bool) ([]Write, error) {
	return cluster.CompletedRequests(b.AuditLog, func(w Write) bool {
		return verb(w.Verb) && w.ObjectRef.Resource == resource && w.ObjectRef.Namespace == ns && (name == "" || w.ObjectRef.Name == name)
	})
}

// By returns the writes of one user.
func By(ws []Write, user string) []Write {
	var out []Write
	for _, w := range ws {
		if w.User.Username == user {
			out = append(out, w)
		}
	}
	return out
}
