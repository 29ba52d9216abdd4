// Package rbac_test checks, without a cluster, that the RBAC shepherd ships
// grants every permission its code declares in +kubebuilder:rbac markers:
// deploy/'s Kustomize variants and the Helm chart's, each rendered, the
// roles bound to shepherd's ServiceAccount. A write added to a reconciler
// with its marker but not to the shipped RBAC fails here — before a
// cluster forbids it and the reconciler retries forever (issue 29: patch on
// PodCliqueSets).
//
// Markers under certs/ are the self-signed certificate mode's, markers in a
// file whose name has "native" are the native admission mode's; the rest
// apply to every variant. A marker with namespace= is granted by a Role
// bound in that namespace (the chart is rendered in shepherd-system), or
// cluster-wide; one without, only cluster-wide.
package rbac_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
)

const (
	shepherdNS     = "shepherd-system"
	serviceAccount = "shepherd"
	markerPrefix   = "// +kubebuilder:rbac:"
)

// marker is one +kubebuilder:rbac marker.
type marker struct {
	where                                         string // file:line
	groups, resources, verbs, resourceNames, urls []string
	namespace                                     string
	selfSigned, native                            bool // only in that mode
}

// markers reads every +kubebuilder:rbac marker of the non-test Go sources.
func markers(t *testing.T, root string) []marker {
	t.Helper()
	var out []marker
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "test", "hack", "vendor", "bin", "charts", "deploy", "examples":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for n := 1; s.Scan(); n++ {
			line := strings.TrimSpace(s.Text())
			if !strings.HasPrefix(line, markerPrefix) {
				continue
			}
			m := marker{
				where:      fmt.Sprintf("%s:%d", filepath.ToSlash(rel), n),
				selfSigned: strings.HasPrefix(filepath.ToSlash(rel), "certs/"),
				native:     strings.Contains(filepath.Base(rel), "native"),
			}
			for _, kv := range strings.Split(strings.TrimPrefix(line, markerPrefix), ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("%s: marker argument %q is not key=value", m.where, kv)
				}
				list := strings.Split(strings.Trim(v, `"`), ";")
				switch k {
				case "groups":
					for i, g := range list {
						if g == "core" {
							list[i] = "" // controller-gen's name for the core group
						}
					}
					m.groups = list
				case "resources":
					m.resources = list
				case "verbs":
					m.verbs = list
				case "resourceNames":
					m.resourceNames = list
				case "urls":
					m.urls = list
				case "namespace":
					m.namespace = v
				default:
					return fmt.Errorf("%s: unknown marker argument %q", m.where, k)
				}
			}
			if len(m.verbs) == 0 || (len(m.resources) == 0 && len(m.urls) == 0) {
				return fmt.Errorf("%s: marker without verbs or resources", m.where)
			}
			out = append(out, m)
		}
		return s.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// grant is a rule bound to shepherd's ServiceAccount, cluster-wide
// (namespace "") or in one namespace.
type grant struct {
	rule      rbacv1.PolicyRule
	namespace string
	from      string
}

// grants are the rules objs bind to shepherd's ServiceAccount.
func grants(t *testing.T, objs []*unstructured.Unstructured) []grant {
	t.Helper()
	decode := func(o *unstructured.Unstructured, into any) {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatalf("decoding %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	clusterRoles, roles := map[string][]rbacv1.PolicyRule{}, map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			decode(o, &r)
			clusterRoles[r.Name] = r.Rules
		case "Role":
			var r rbacv1.Role
			decode(o, &r)
			roles[r.Namespace+"/"+r.Name] = r.Rules
		}
	}
	toShepherd := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == serviceAccount && s.Namespace == shepherdNS
		})
	}
	var out []grant
	add := func(rules []rbacv1.PolicyRule, ns, from string) {
		for _, r := range rules {
			out = append(out, grant{rule: r, namespace: ns, from: from})
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			decode(o, &b)
			if toShepherd(b.Subjects) && b.RoleRef.Kind == "ClusterRole" {
				add(clusterRoles[b.RoleRef.Name], "", "ClusterRole "+b.RoleRef.Name)
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			decode(o, &b)
			if !toShepherd(b.Subjects) {
				continue
			}
			if b.RoleRef.Kind == "ClusterRole" {
				add(clusterRoles[b.RoleRef.Name], b.Namespace, "ClusterRole "+b.RoleRef.Name)
			} else {
				add(roles[b.Namespace+"/"+b.RoleRef.Name], b.Namespace, "Role "+b.Namespace+"/"+b.RoleRef.Name)
			}
		}
	}
	return out
}

func has(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }

// allows reports whether g grants verb on group/resource (name: "" for
// any) in namespace ns ("": cluster-wide).
func (g grant) allows(verb, group, resource, name, ns string) bool {
	r := g.rule
	if g.namespace != "" && g.namespace != ns {
		return false
	}
	if !has(r.Verbs, verb) || !has(r.APIGroups, group) || !has(r.Resources, resource) {
		return false
	}
	return len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name))
}

func (g grant) allowsURL(verb, url string) bool {
	return g.namespace == "" && has(g.rule.Verbs, verb) && slices.Contains(g.rule.NonResourceURLs, url)
}

// missing lists what of ms the grants do not allow.
func missing(ms []marker, gs []grant, selfSigned, native bool) []string {
	var out []string
	for _, m := range ms {
		if (m.selfSigned && !selfSigned) || (m.native && !native) {
			continue
		}
		names := m.resourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, verb := range m.verbs {
			for _, url := range m.urls {
				if !slices.ContainsFunc(gs, func(g grant) bool { return g.allowsURL(verb, url) }) {
					out = append(out, fmt.Sprintf("%s %s (%s)", verb, url, m.where))
				}
			}
			for _, group := range m.groups {
				for _, res := range m.resources {
					for _, name := range names {
						if slices.ContainsFunc(gs, func(g grant) bool { return g.allows(verb, group, res, name, m.namespace) }) {
							continue
						}
						what := res
						if group != "" {
							what += "." + group
						}
						if name != "" {
							what += " named " + name
						}
						if m.namespace != "" {
							what += " in " + m.namespace
						}
						out = append(out, fmt.Sprintf("%s %s (%s)", verb, what, m.where))
					}
				}
			}
		}
	}
	return out
}

// renderChart renders the chart as `helm template` does, in shepherdNS.
func renderChart(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	c, err := loader.Load(filepath.Join(cluster.RepoRoot(), "charts", "shepherd"))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly = true, true
	inst.ReleaseName, inst.Namespace = "shepherd", shepherdNS
	kv, err := chartutil.ParseKubeVersion(cluster.K8sVersion)
	if err != nil {
		t.Fatal(err)
	}
	inst.KubeVersion = kv
	rel, err := inst.Run(c, values)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", values, err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func TestShippedRBACGrantsEveryMarker(t *testing.T) {
	ms := markers(t, cluster.RepoRoot())
	// The markers must still be there to be checked: the reconcilers', the
	// certificate code's and the native mode's (a marker moved or misspelt
	// would silently check nothing).
	for _, want := range []struct {
		file, verb, resource string
	}{
		{"integrations/grove/training/", "patch", "podcliques"},
		{"integrations/grove/training/", "create", "workloadrecords"},
		{"integrations/grove/gang/", "delete", "podcliques"},
		{"integrations/trainer/trainjob/", "delete", "trainjobs"},
		{"integrations/workload/", "create", "podgroups"},
		{"certs/", "patch", "secrets"},
		{"serve/native.go", "create", "validatingadmissionpolicies"},
		{"leader/", "update", "leases"},
		{"webhook/exceptions/", "patch", "mutatingadmissionpolicies"},
	} {
		if !slices.ContainsFunc(ms, func(m marker) bool {
			return strings.HasPrefix(m.where, want.file) && slices.Contains(m.verbs, want.verb) && slices.Contains(m.resources, want.resource)
		}) {
			t.Errorf("no +kubebuilder:rbac marker in %s for %s %s", want.file, want.verb, want.resource)
		}
	}

	variants := []struct {
		name               string
		objs               func(t *testing.T) []*unstructured.Unstructured
		selfSigned, native bool
	}{
		{"deploy/default", kustomize("default"), true, false},
		{"deploy/cert-manager", kustomize("cert-manager"), false, false},
		{"deploy/native", kustomize("native"), true, true},
		{"chart", chart(nil), true, false},
		{"chart, certificates.mode=cert-manager", chart(map[string]any{"certificates": map[string]any{"mode": "cert-manager"}}), false, false},
		{"chart, admission.mode=native", chart(map[string]any{"admission": map[string]any{"mode": "native"}}), true, true},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			gs := grants(t, v.objs(t))
			if len(gs) == 0 {
				t.Fatal("no rules bound to shepherd's ServiceAccount")
			}
			for _, m := range missing(ms, gs, v.selfSigned, v.native) {
				t.Errorf("the code declares it needs to %s, but the shipped RBAC does not grant it", m)
			}
		})
	}
}

func kustomize(dir string) func(t *testing.T) []*unstructured.Unstructured {
	return func(t *testing.T) []*unstructured.Unstructured {
		t.Helper()
		objs, err := install.Build(install.Dir(dir))
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
}

func chart(values map[string]any) func(t *testing.T) []*unstructured.Unstructured {
	return func(t *testing.T) []*unstructured.Unstructured {
		t.Helper()
		if values == nil {
			values = map[string]any{}
		}
		return renderChart(t, values)
	}
}

// The check itself: a marker the grants lack is reported, a name-limited
// rule does not grant another name or every name, a Role grants only in
// its namespace.
func TestMissing(t *testing.T) {
	gs := []grant{
		{rule: rbacv1.PolicyRule{APIGroups: []string{"grove.io"}, Resources: []string{"podcliquesets"}, Verbs: []string{"get", "list", "watch"}}},
		{rule: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}, ResourceNames: []string{"mine"}}, namespace: "ns"},
	}
	for _, tc := range []struct {
		name string
		m    marker
		want int
	}{
		{"granted", marker{groups: []string{"grove.io"}, resources: []string{"podcliquesets"}, verbs: []string{"get", "watch"}}, 0},
		{"verb missing", marker{groups: []string{"grove.io"}, resources: []string{"podcliquesets"}, verbs: []string{"get", "patch"}}, 1},
		{"by name in its namespace", marker{groups: []string{""}, resources: []string{"secrets"}, verbs: []string{"patch"}, resourceNames: []string{"mine"}, namespace: "ns"}, 0},
		{"another name", marker{groups: []string{""}, resources: []string{"secrets"}, verbs: []string{"patch"}, resourceNames: []string{"theirs"}, namespace: "ns"}, 1},
		{"every name", marker{groups: []string{""}, resources: []string{"secrets"}, verbs: []string{"patch"}, namespace: "ns"}, 1},
		{"another namespace", marker{groups: []string{""}, resources: []string{"secrets"}, verbs: []string{"patch"}, resourceNames: []string{"mine"}, namespace: "other"}, 1},
		{"cluster-wide from a Role", marker{groups: []string{""}, resources: []string{"secrets"}, verbs: []string{"patch"}, resourceNames: []string{"mine"}}, 1},
		{"another mode's", marker{groups: []string{"x"}, resources: []string{"y"}, verbs: []string{"z"}, native: true}, 0},
	} {
		if got := missing([]marker{tc.m}, gs, true, false); len(got) != tc.want {
			t.Errorf("%s: missing %v, want %d", tc.name, got, tc.want)
		}
	}
}
