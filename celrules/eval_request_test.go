package celrules

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// The request variable carries the Input's user (name, groups, extra) and
// dryRun, as the apiserver's does: fields the user lacks are absent, so
// the rules read them optionally.
func TestRequestVariableCarriesTheUserAndDryRun(t *testing.T) {
	e := policyEngine(t,
		policy("no-mallory", nil, "request.userInfo.username != 'mallory'"),
		policy("no-admins", nil, "!('admins' in request.userInfo.?groups.orValue([]))"),
		policy("no-admin-scope", nil, "!('admin' in request.userInfo.?extra[?'scopes'].orValue([]))"),
		policy("no-dry-run", nil, "!request.dryRun"),
	)
	for _, tc := range []struct {
		name string
		user authenticationv1.UserInfo
		dry  bool
		want []string
	}{
		{"alice", authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}}, false, nil},
		{"mallory", authenticationv1.UserInfo{Username: "mallory"}, false, []string{"no-mallory/Deny"}},
		{"an admin", authenticationv1.UserInfo{Username: "bob", Groups: []string{"dev", "admins"}}, false, []string{"no-admins/Deny"}},
		{"an admin scope", authenticationv1.UserInfo{Username: "bob", Extra: map[string]authenticationv1.ExtraValue{"scopes": {"read", "admin"}}}, false, []string{"no-admin-scope/Deny"}},
		{"other extra", authenticationv1.UserInfo{Username: "bob", Extra: map[string]authenticationv1.ExtraValue{"scopes": {"read"}}}, false, nil},
		{"a dry run", authenticationv1.UserInfo{Username: "alice"}, true, []string{"no-dry-run/Deny"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := trainJobInput("CREATE", trainJob(nil, nil), nil)
			in.UserInfo, in.DryRun = tc.user, tc.dry
			res := e.Evaluate(context.Background(), in)
			if diff := cmp.Diff(tc.want, rules(res)); diff != "" {
				t.Errorf("verdicts (-want +got):\n%s\n%+v", diff, res)
			}
		})
	}
}

// The request's Namespace is looked up once per request, however many
// rules read it; a cluster-scoped object has no namespaceObject and no
// lookup; a namespace the lookup does not find is null to the rules that
// read it (offline there is usually none), but fails a namespaceSelector
// as the apiserver's 404 does.
func TestNamespaceLookups(t *testing.T) {
	lookups := 0
	var found *corev1.Namespace
	lookup := func(context.Context, string) (*corev1.Namespace, error) {
		lookups++
		return found, nil
	}
	e := policyEngine(t,
		policy("reads-ns-1", nil, "namespaceObject == null || namespaceObject.metadata.name == 'team-a'"),
		policy("reads-ns-2", nil, "namespaceObject == null || !has(namespaceObject.metadata.labels) || !('frozen' in namespaceObject.metadata.labels)"),
	)
	found = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"frozen": "yes"}}}
	in := trainJobInput("CREATE", trainJob(nil, nil), nil)
	in.Namespaces = lookup
	if diff := cmp.Diff([]string{"reads-ns-2/Deny"}, rules(e.Evaluate(context.Background(), in))); diff != "" || lookups != 1 {
		t.Errorf("two rules reading the namespace: %d lookups (want 1), verdicts (-want +got):\n%s", lookups, diff)
	}

	lookups, found = 0, nil // the lookup answers nothing, without an error
	if res := e.Evaluate(context.Background(), in); len(res) != 0 || lookups != 1 {
		t.Errorf("an unknown namespace: %v after %d lookups, want no verdict (namespaceObject null) after 1", rules(res), lookups)
	}

	// A ClusterTrainingRuntime: cluster-scoped.
	onRuntimes := func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.Resources[0].Kinds = []string{"ClusterTrainingRuntime"}
	}
	e = policyEngine(t, policy("cluster", onRuntimes, "namespaceObject == null"))
	lookups = 0
	rt := &Input{Operation: "CREATE", Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "ClusterTrainingRuntime", Resource: "clustertrainingruntimes",
		Name: "torch", Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": map[string]any{"name": "torch"}},
		Namespaces: lookup}
	if res := e.Evaluate(context.Background(), rt); len(res) != 0 || lookups != 0 {
		t.Errorf("a cluster-scoped object: %v after %d lookups, want none after none", rules(res), lookups)
	}

	// A namespaceSelector with a lookup that finds nothing: the 404.
	e = policyEngine(t, policy("selects", func(s *shepherdv1alpha1.WorkloadPolicySpec) {
		s.Match.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	}, "false"))
	found = nil
	res := e.Evaluate(context.Background(), in)
	if len(res) != 1 || !res[0].EvalError || !strings.Contains(res[0].Message, `namespaces "team-a" not found`) {
		t.Errorf("a selector and no namespace: %+v, want the rule failing on the 404", res)
	}
	// No lookup at all is the same 404.
	in.Namespaces = nil
	res = e.Evaluate(context.Background(), in)
	if len(res) != 1 || !res[0].EvalError || !strings.Contains(res[0].Message, `namespaces "team-a" not found`) {
		t.Errorf("a selector and no lookup: %+v, want the rule failing on the 404", res)
	}
}
