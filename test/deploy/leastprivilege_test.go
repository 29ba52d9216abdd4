package deploy_test

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// access is one request shepherd's ServiceAccount may or may not make.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	if a.name != "" {
		where += " named " + a.name
	}
	return fmt.Sprintf("%s %s %s", a.verb, r, where)
}

// TestRBACLeastPrivilege asks the apiserver (SubjectAccessReview) what
// deploy/default's RBAC lets shepherd's ServiceAccount do: every write the
// reconcilers, the webhook and the certificate controller make must be
// allowed, and the obvious excesses must be denied.
func TestRBACLeastPrivilege(t *testing.T) {
	applyIdentityAndWebhooks(t)
	const ns = "team-a" // any workload namespace
	allowed := []access{
		// R-TJ: the Failed condition of a deadline, JobSet deletion on
		// deadline, TTL deletion.
		{verb: "patch", group: "trainer.kubeflow.org", resource: "trainjobs", subresource: "status", namespace: ns},
		{verb: "delete", group: "trainer.kubeflow.org", resource: "trainjobs", namespace: ns},
		{verb: "delete", group: "jobset.x-k8s.io", resource: "jobsets", namespace: ns},
		// R-WL.
		{verb: "create", group: "scheduling.k8s.io", resource: "workloads", namespace: ns},
		{verb: "create", group: "scheduling.k8s.io", resource: "podgroups", namespace: ns},
		// R-TR: a failed Training set's PodCliques scaled to 0.
		{verb: "patch", group: "grove.io", resource: "podcliques", namespace: ns},
		// What shepherd derives: its own records.
		{verb: "create", group: "shepherd.dev", resource: "workloadrecords", namespace: ns},
		{verb: "patch", group: "shepherd.dev", resource: "workloadrecords", namespace: ns},
		{verb: "delete", group: "grove.io", resource: "podcliques", namespace: ns},
		{verb: "delete", resource: "pods", namespace: ns},
		{verb: "watch", resource: "pods"},
		// Policies and audit.
		{verb: "patch", group: "shepherd.dev", resource: "workloadpolicies", subresource: "status"},
		{verb: "create", resource: "events", namespace: ns},
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: ns},
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		// Leader election and certificates.
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: shepherdNS, name: "shepherd.shepherd.dev"},
		// An expired Lease is deleted (with a UID and resourceVersion
		// precondition) and taken at once.
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: shepherdNS, name: "shepherd.shepherd.dev"},
		{verb: "create", resource: "secrets", namespace: shepherdNS},
		{verb: "patch", resource: "secrets", namespace: shepherdNS, name: "shepherd-webhook-certs"},
		{verb: "watch", resource: "secrets", namespace: shepherdNS, name: "shepherd-webhook-certs"},
		{verb: "patch", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "defaults.shepherd.dev"},
		{verb: "patch", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "shepherd"},
		// --defer-to-upstream: which upstream webhooks are registered.
		{verb: "watch", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations"},
		// The background audit's OpenReports.
		{verb: "create", group: "openreports.io", resource: "reports", namespace: ns},
		{verb: "patch", group: "openreports.io", resource: "reports", namespace: ns, name: "shepherd-audit"},
		{verb: "delete", group: "openreports.io", resource: "clusterreports", name: "shepherd-audit"},
	}
	denied := []access{
		{verb: "list", resource: "secrets"},
		{verb: "get", resource: "secrets", namespace: shepherdNS, name: "someone-elses"},
		{verb: "get", resource: "secrets", namespace: ns, name: "shepherd-webhook-certs"},
		{verb: "delete", resource: "secrets", namespace: shepherdNS, name: "shepherd-webhook-certs"},
		{verb: "patch", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "another-webhook"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "defaults.shepherd.dev"},
		{verb: "patch", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "shepherd"},
		{verb: "update", group: "trainer.kubeflow.org", resource: "trainjobs", namespace: ns},
		// Grove owns the PodCliqueSet and rewrites it: shepherd's state
		// lives in its WorkloadRecords (issue 30).
		{verb: "patch", group: "grove.io", resource: "podcliquesets", namespace: ns},
		{verb: "patch", group: "grove.io", resource: "podcliquesets", subresource: "status", namespace: ns},
		// Grove writes PodClique and scaling-group status; gang
		// termination keeps what it derives in the set's record (issue 30).
		{verb: "patch", group: "grove.io", resource: "podcliques", subresource: "status", namespace: ns},
		{verb: "patch", group: "grove.io", resource: "podcliquescalinggroups", subresource: "status", namespace: ns},
		{verb: "delete", group: "shepherd.dev", resource: "workloadrecords", namespace: ns},
		{verb: "patch", group: "trainer.kubeflow.org", resource: "trainingruntimes", namespace: ns},
		{verb: "create", resource: "pods", namespace: ns},
		{verb: "patch", resource: "pods", namespace: ns},
		{verb: "create", group: "apps", resource: "deployments", namespace: shepherdNS},
		{verb: "delete", group: "scheduling.k8s.io", resource: "workloads", namespace: ns},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager"},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: shepherdNS, name: "another-lease"},
		{verb: "impersonate", resource: "serviceaccounts", namespace: ns},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		{verb: "delete", group: "shepherd.dev", resource: "workloadpolicies"},
		{verb: "update", group: "openreports.io", resource: "reports", namespace: ns},
	}
	check := func(a access) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   serviceAccount.UserName,
			Groups: serviceAccount.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				Namespace: a.namespace, Name: a.name,
			},
		}}
		if err := env.Client.Create(context.Background(), sar); err != nil {
			t.Fatalf("SubjectAccessReview for %s: %v", a, err)
		}
		return sar.Status.Allowed
	}
	for _, a := range allowed {
		if !check(a) {
			t.Errorf("shepherd needs to %s, but its RBAC denies it", a)
		}
	}
	for _, a := range denied {
		if check(a) {
			t.Errorf("shepherd's RBAC lets it %s; it never needs to", a)
		}
	}
}
