// Package helm_test checks the Helm chart in charts/shepherd: it renders the
// chart in-process with the Helm Go module for several value sets, lints it
// with Helm's linter, checks that it renders the same objects as the
// Kustomize variants of deploy/ object by object (kustomize_test.go lists
// the deliberate differences, each with its reason), server-side
// dry-runs every rendered object on a real kube-apiserver, and installs and
// upgrades a release there to show that an upgrade keeps the certificate
// Secret and the webhook configurations' caBundle that shepherd manages.
//
// cert-manager's CRDs come from the cert-manager module go.mod pins (as in
// test/interop). No module publishes the Prometheus Operator's CRDs, so the
// ServiceMonitor and the PrometheusRule are the objects not dry-run: they
// are compared with deploy/prometheus's and deploy/observability's instead,
// which test/deploy and test/observability check.
package helm_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

const (
	defaultNS = "shepherd-system"
	customNS  = "ml-platform"
)

func chartDir() string { return filepath.Join(cluster.RepoRoot(), "charts", "shepherd") }

// valueSet is one way to install the chart.
type valueSet struct {
	name      string
	namespace string
	values    map[string]any
	// kustomize names the install.Variants variant that renders the same
	// objects, when one does.
	kustomize string
}

// valueSets are the value sets every test renders.
var valueSets = []valueSet{
	{name: "defaults", namespace: defaultNS, kustomize: "default"},
	{name: "cert-manager", namespace: defaultNS, kustomize: "cert-manager",
		values: map[string]any{"certificates": map[string]any{"mode": "cert-manager"}}},
	{name: "servicemonitor", namespace: defaultNS, kustomize: "default+prometheus",
		values: map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}}}}},
	{name: "custom", namespace: customNS, values: customValues()},
	{name: "observability", namespace: defaultNS, kustomize: "default+observability",
		values: map[string]any{"observability": map[string]any{
			"grafanaDashboard": map[string]any{"enabled": true},
			"prometheusRule":   map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		}}},
	{name: "cert-manager-elsewhere", namespace: customNS,
		values: map[string]any{"certificates": map[string]any{"mode": "cert-manager"}, "crds": map[string]any{"install": false}}},
	{name: "native", namespace: defaultNS, kustomize: "native",
		values: map[string]any{"admission": map[string]any{"mode": "native"}}},
	{name: "client-ca", namespace: defaultNS, kustomize: "default+client-ca",
		values: map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"enabled": true}}}},
	{name: "network-policy", namespace: defaultNS, kustomize: "default+network-policy",
		values: map[string]any{"networkPolicy": map[string]any{"enabled": true}}},
	{name: "security-elsewhere", namespace: customNS, values: map[string]any{
		"webhook": map[string]any{"clientCA": map[string]any{"enabled": true, "configMap": "apiserver-client-ca", "key": "bundle.pem"}},
		"networkPolicy": map[string]any{"enabled": true,
			"ingressFrom":        []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}},
			"metricsIngressFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
		},
	}},
	{name: "native-elsewhere", namespace: customNS, values: map[string]any{
		"admission":    map[string]any{"mode": "native", "auditSink": map[string]any{"tokenSecret": "audit-token"}},
		"certificates": map[string]any{"mode": "cert-manager"},
		"webhook":      map[string]any{"failurePolicy": "Ignore", "timeoutSeconds": 10, "excludedNamespaces": []any{"kube-system", "gpu-operator"}},
	}},
}

// customValues changes every value that has an effect on the objects.
func customValues() map[string]any {
	return map[string]any{
		"image":             map[string]any{"repository": "registry.example.com/shepherd", "tag": "v0.1.0", "pullPolicy": "Always"},
		"imagePullSecrets":  []any{"registry-creds"},
		"replicas":          1,
		"podAntiAffinity":   "required",
		"resources":         map[string]any{"limits": map[string]any{"memory": "1Gi", "cpu": "2"}},
		"goMemLimitPercent": 80,
		"priorityClassName": "system-cluster-critical",
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}},
		"podAnnotations":    map[string]any{"example.com/team": "platform"},
		"extraEnv":          []any{map[string]any{"name": "GOGC", "value": "200"}},
		"extraArgs":         []any{"--disable-rule=V-JS-5"},
		"webhook":           map[string]any{"failurePolicy": "Ignore", "timeoutSeconds": 10, "excludedNamespaces": []any{"kube-system", "kube-node-lease", "gpu-operator"}},
		"metrics":           map[string]any{"enabled": false},
		"crds":              map[string]any{"install": false},
		"audit":             map[string]any{"interval": "30m", "cpuShare": 0.1, "reports": false, "reportMaxResults": 50},
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir(), err)
	}
	return c
}

// render runs `helm install --dry-run` client-side (as `helm template`
// does): the release, with its notes, and its objects.
func render(t *testing.T, vs valueSet) (*release.Release, []*unstructured.Unstructured) {
	t.Helper()
	rel, err := renderErr(loadChart(t), vs)
	if err != nil {
		t.Fatalf("rendering the chart with the %s values: %v", vs.name, err)
	}
	objs, err := decodeManifest(rel.Manifest)
	if err != nil {
		t.Fatalf("the %s values: %v", vs.name, err)
	}
	return rel, objs
}

func renderErr(c *chart.Chart, vs valueSet) (*release.Release, error) {
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.ReleaseName = "shepherd"
	inst.Namespace = vs.namespace
	kv, err := chartutil.ParseKubeVersion(cluster.K8sVersion)
	if err != nil {
		return nil, err
	}
	inst.KubeVersion = kv
	vals := vs.values
	if vals == nil {
		vals = map[string]any{}
	}
	return inst.Run(c, vals)
}

// decodeManifest splits a release manifest into objects, through JSON so
// numbers decode as in any object read from the apiserver.
func decodeManifest(manifest string) ([]*unstructured.Unstructured, error) {
	docs := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []*unstructured.Unstructured
	for _, k := range keys {
		if strings.TrimSpace(docs[k]) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(docs[k]))
		if err != nil {
			return nil, fmt.Errorf("rendered document %s: %w", k, err)
		}
		if string(j) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("rendered document %s: %w\n%s", k, err, docs[k])
		}
		out = append(out, u)
	}
	return out, nil
}

// key names an object by group, kind, namespace and name.
func key(o *unstructured.Unstructured) string {
	gk := o.GroupVersionKind().GroupKind()
	return fmt.Sprintf("%s/%s/%s", gk.String(), o.GetNamespace(), o.GetName())
}

func valueSetNamed(t *testing.T, name string) valueSet {
	t.Helper()
	for _, vs := range valueSets {
		if vs.name == name {
			return vs
		}
	}
	t.Fatalf("no value set %q", name)
	return valueSet{}
}
