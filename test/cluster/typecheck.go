package cluster

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TypeCheckVAPs runs the apiserver's own ValidatingAdmissionPolicy type
// checker (the one kube-controller-manager runs to fill
// status.typeChecking; this control plane has no controller-manager)
// against the schemas the apiserver publishes, on each of vaps as stored,
// and fails the test on any warning.
func (c *Cluster) TypeCheckVAPs(t testing.TB, vaps []*admissionregistrationv1.ValidatingAdmissionPolicy) {
	t.Helper()
	checker := func() *validating.TypeChecker {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
		return &validating.TypeChecker{SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: dc}, RestMapper: mapper}
	}
	tc := checker()
	for _, v := range vaps {
		var live admissionregistrationv1.ValidatingAdmissionPolicy
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(v), &live); err != nil {
			t.Fatal(err)
		}
		// A misspelled field must be caught: proof that the checker resolved
		// the matched kinds' schemas rather than checking nothing. The
		// apiserver publishes a new CRD's OpenAPI schema a little after the
		// CRD is established, so the checker (rebuilt, as discovery caches)
		// is given a while to find it.
		found := func() bool {
			return len(tc.CheckExpression(tc.CreateContext(&live), "object.spec.noSuchFieldAnywhere == 1")) > 0
		}
		if err := testkit.Poll(250*time.Millisecond, 30*time.Second, func() bool {
			if found() {
				return true
			}
			tc = checker()
			return false
		}); err != nil {
			t.Errorf("%s: the type checker found no schema to check against: %v", v.Name, err)
		}
		if w := tc.Check(&live); len(w) > 0 {
			t.Errorf("%s: type-check warnings: %+v", v.Name, w)
		}
	}
}
