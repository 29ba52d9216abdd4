package replicas

import (
	"slices"
	"testing"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// auditPolicy records, at Metadata level, every write that enforcing a
// deadline, a TTL or a Training restart makes: TrainJob status patches and
// deletes, JobSet deletes, PodCliqueSet status and PodClique patches, pod
// deletes; and the Workload and PodGroup creates of the Workload
// controller. Nothing else (the log stays small). The seed plane's audit
// log (JSON lines, written synchronously: --audit-log-mode=blocking, the
// default) is what every replica asked of the apiserver, by whom, with what
// answer: how the failover tests count writes, including attempts that
// failed, which no watch sees. The bed's plane has the bed's
// (bed.APIServerOptions).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["delete", "deletecollection", "patch", "update"]
  resources:
  - group: trainer.kubeflow.org
    resources: ["trainjobs", "trainjobs/status"]
  - group: jobset.x-k8s.io
    resources: ["jobsets"]
  - group: grove.io
    resources: ["podcliquesets", "podcliquesets/status", "podcliques"]
- level: Metadata
  verbs: ["create"]
  resources:
  - group: scheduling.k8s.io
    resources: ["workloads", "podgroups"]
- level: Metadata
  verbs: ["delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods"]
- level: None
`

// auditEvent is one request of the audit log.
type auditEvent = cluster.AuditEvent

// audited returns the completed requests (stage ResponseComplete) of verb
// on resource/subresource in namespace ns, oldest first, but the
// operators' own (on the bed, Trainer writes a TrainJob's status too).
func (pl *plane) audited(t *testing.T, ns, verb, resource, subresource string) []auditEvent {
	t.Helper()
	out, err := cluster.CompletedRequests(pl.auditLog, func(e auditEvent) bool {
		return e.Verb == verb && e.ObjectRef.Namespace == ns && e.ObjectRef.Resource == resource && e.ObjectRef.Subresource == subresource &&
			!slices.Contains(pl.operators, e.User.Username)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubeconfigAs writes a kubeconfig for a new user of the control plane
// bound by shepherd's shipped RBAC, its Lease in leaseNS (a client
// certificate of its own, cluster.KubeconfigAsShepherd) into a temporary
// directory and returns its path. Each replica runs as its own user, so
// the audit log tells which replica made each write.
func (pl *plane) kubeconfigAs(t *testing.T, user, leaseNS string) string {
	t.Helper()
	path, err := pl.KubeconfigAsShepherd(t.TempDir(), user, leaseNS, cluster.RBACDefault)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
