package helm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
)

// TestLint: Helm's linter (Chart.yaml, values against the schema, every
// template rendered and parsed) finds nothing above INFO for any value set.
func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals := vs.values
			if vals == nil {
				vals = map[string]any{}
			}
			l := lint.All(chartDir(), vals, vs.namespace, false)
			if len(l.Messages) == 0 {
				t.Fatal("the linter reported nothing, not even that it ran: is the chart there?")
			}
			for _, m := range l.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %v", m)
				} else {
					t.Logf("lint: %v", m)
				}
			}
		})
	}
}

// TestSchemaRejectsBadValues: values.schema.json types every value and
// rejects unknown ones, so a typo fails the install instead of being
// ignored; the templates refuse the combinations the schema cannot express.
func TestSchemaRejectsBadValues(t *testing.T) {
	c := loadChart(t)
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unknown top-level key":          {map[string]any{"replica": 3}, "replica"},
		"unknown nested key":             {map[string]any{"webhook": map[string]any{"timeout": 3}}, "timeout"},
		"replicas as a string":           {map[string]any{"replicas": "2"}, "replicas"},
		"no replicas":                    {map[string]any{"replicas": 0}, "replicas"},
		"failurePolicy":                  {map[string]any{"webhook": map[string]any{"failurePolicy": "Deny"}}, "failurePolicy"},
		"timeout above 30s":              {map[string]any{"webhook": map[string]any{"timeoutSeconds": 31}}, "timeoutSeconds"},
		"certificate mode":               {map[string]any{"certificates": map[string]any{"mode": "vault"}}, "mode"},
		"memory limit not whole":         {map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "0.5Gi"}}}, "resources.limits.memory \"0.5Gi\": use a whole number"},
		"GOMEMLIMIT at the limit":        {map[string]any{"goMemLimitPercent": 100}, "goMemLimitPercent"},
		"invalid namespace":              {map[string]any{"webhook": map[string]any{"excludedNamespaces": []any{"Kube_System"}}}, "excludedNamespaces"},
		"extraEnv overriding GOMEMLIMIT": {map[string]any{"extraEnv": []any{map[string]any{"name": "GOMEMLIMIT", "value": "1GiB"}}}, "extraEnv"},
		"PDB that blocks drains":         {map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": 2}}, "minAvailable"},
		"ServiceMonitor without metrics": {map[string]any{"metrics": map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}}}, "metrics.enabled"},
		"audit interval not a duration":  {map[string]any{"audit": map[string]any{"interval": "10 minutes"}}, "interval"},
		"audit CPU share of 0":           {map[string]any{"audit": map[string]any{"cpuShare": 0}}, "cpuShare"},
		"audit CPU share above 1":        {map[string]any{"audit": map[string]any{"cpuShare": 1.5}}, "cpuShare"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderErr(c, valueSet{name: name, namespace: defaultNS, values: tc.values})
			if err == nil {
				t.Fatalf("values %v rendered; want an error naming %q", tc.values, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// TestCRDIsDeployCopy: the chart carries exactly deploy/crds' CRDs
// (WorkloadPolicy, WorkloadRecord; make manifests copies them there), and
// they are the only CRDs any value set renders: shepherd never installs another project's.
func TestCRDIsDeployCopy(t *testing.T) {
	chartCRDs, err := filepath.Glob(filepath.Join(chartDir(), "files", "shepherd.dev_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	deployCRDs, err := filepath.Glob(filepath.Join(cluster.CRDDir(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(deployCRDs) == 0 || len(chartCRDs) != len(deployCRDs) {
		t.Fatalf("charts/shepherd/files has %d CRDs, deploy/crds %d: run make manifests (and remove the chart copy of a CRD deploy/crds no longer has)", len(chartCRDs), len(deployCRDs))
	}
	for _, f := range deployCRDs {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir(), "files", filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/shepherd/files/%s differs from deploy/crds/%[1]s (%v): run make manifests", filepath.Base(f), err)
		}
	}
	for _, vs := range valueSets {
		_, objs := render(t, vs)
		crds := install.Find(objs, "CustomResourceDefinition", "")
		install := true
		if v, ok := vs.values["crds"].(map[string]any); ok {
			install = v["install"].(bool)
		}
		if install != (len(crds) == len(deployCRDs)) {
			t.Errorf("%s values: %d CRDs rendered, crds.install %v", vs.name, len(crds), install)
		}
		for _, crd := range crds {
			if g, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); g != "shepherd.dev" {
				t.Errorf("%s values render CRD %s of group %q: shepherd owns only shepherd.dev", vs.name, crd.GetName(), g)
			}
			if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("%s values: CRD %s lacks helm.sh/resource-policy: keep (an uninstall would delete every WorkloadPolicy)", vs.name, crd.GetName())
			}
		}
	}
}

// TestObservabilityIsDeployCopy: the chart's dashboard and alerts are
// exactly deploy/observability's, which test/observability checks against
// shepherd's metrics and Prometheus' parser.
func TestObservabilityIsDeployCopy(t *testing.T) {
	for _, f := range []string{"shepherd-dashboard.json", "prometheusrule.yaml"} {
		want, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "deploy", "observability", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir(), "files", f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/shepherd/files/%s differs from deploy/observability/%[1]s (%v): copy it", f, err)
		}
	}
}

// typed decodes the one object of kind/name.
func typed[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	found := install.Find(objs, kind, name)
	if len(found) != 1 {
		t.Fatalf("%d %s %q rendered, want 1", len(found), kind, name)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out); err != nil {
		t.Fatalf("decoding %s %s: %v", kind, name, err)
	}
	return out
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// goMemLimitBytes parses the KiB form the chart writes.
func goMemLimitBytes(t *testing.T, c corev1.Container) int64 {
	t.Helper()
	e := envVar(c, "GOMEMLIMIT")
	if e == nil || !strings.HasSuffix(e.Value, "KiB") {
		t.Fatalf("GOMEMLIMIT = %+v, want a value in KiB", e)
	}
	q, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
	if err != nil {
		t.Fatalf("GOMEMLIMIT %q: %v", e.Value, err)
	}
	return q.Value()
}

// TestDefaults: the defaults an admin gets without setting anything, and
// the notes printed after the install.
func TestDefaults(t *testing.T) {
	rel, objs := render(t, valueSetNamed(t, "defaults"))
	var list []string
	for _, o := range objs {
		list = append(list, o.GetKind()+" "+strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/"))
	}
	slices.Sort(list)
	t.Logf("rendered with the default values (%d objects):\n  %s", len(objs), strings.Join(list, "\n  "))

	dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v, want a preferred pod anti-affinity", pod.Affinity)
	}
	c := pod.Containers[0]
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v, want CPU and memory requests and limits", c.Resources)
	}
	if got := goMemLimitBytes(t, c); got >= limit.Value() || got < limit.Value()*3/4 {
		t.Errorf("GOMEMLIMIT %d bytes, want below the %d-byte memory limit (by at most 25%%)", got, limit.Value())
	}
	if pod.PriorityClassName != "" {
		t.Errorf("priorityClassName %q by default", pod.PriorityClassName)
	}
	if len(install.Find(objs, "PodDisruptionBudget", "shepherd")) != 1 {
		t.Error("no PodDisruptionBudget with 2 replicas")
	}
	for _, o := range install.Find(objs, "Secret", "") {
		t.Errorf("the chart renders Secret %s: shepherd creates and rotates its certificate Secret itself", o.GetName())
	}
	t.Logf("NOTES.txt:\n%s", rel.Info.Notes)
	for _, want := range []string{"kubectl -n shepherd-system rollout status deploy/shepherd", "shepherd-system/shepherd-webhook-certs", "shepherd-metrics-reader", "failurePolicy Fail", "kube-system, shepherd-system"} {
		if !strings.Contains(rel.Info.Notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, rel.Info.Notes)
		}
	}
}

// TestWebhooksHaveNoCABundle: no value set renders a caBundle, so `helm
// upgrade` never clears the one shepherd or cert-manager injected
// (TestUpgradeKeepsCertificates shows it on a real apiserver).
func TestWebhooksHaveNoCABundle(t *testing.T) {
	for _, vs := range valueSets {
		_, objs := render(t, vs)
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			for _, o := range install.Find(objs, kind, "") {
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for _, h := range hooks {
					if _, ok, _ := unstructured.NestedFieldNoCopy(h.(map[string]any), "clientConfig", "caBundle"); ok {
						t.Errorf("%s values: %s %s renders a caBundle", vs.name, kind, o.GetName())
					}
				}
			}
		}
	}
}

// TestCustomValues: every value of the custom set reaches the objects.
func TestCustomValues(t *testing.T) {
	rel, objs := render(t, valueSetNamed(t, "custom"))
	for _, o := range objs {
		if o.GetNamespace() != "" && o.GetNamespace() != customNS {
			t.Errorf("%s is in namespace %q, want the release namespace %s", key(o), o.GetNamespace(), customNS)
		}
	}
	if n := install.Find(objs, "PodDisruptionBudget", ""); len(n) != 0 {
		t.Error("a PodDisruptionBudget with one replica blocks every node drain")
	}
	if n := install.Find(objs, "CustomResourceDefinition", ""); len(n) != 0 {
		t.Error("crds.install false renders the CRD")
	}
	dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if *dep.Spec.Replicas != 1 || pod.PriorityClassName != "system-cluster-critical" ||
		c.Image != "registry.example.com/shepherd:v0.1.0" || c.ImagePullPolicy != corev1.PullAlways ||
		len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "registry-creds" ||
		pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 ||
		dep.Spec.Template.Annotations["example.com/team"] != "platform" {
		t.Errorf("pod spec does not carry the values: %+v", pod)
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v, want a required pod anti-affinity", pod.Affinity)
	}
	for _, want := range []string{"--metrics-bind-address=0", "--disable-rule=V-JS-5",
		"--audit-interval=30m", "--audit-cpu-share=0.1", "--audit-reports=false", "--audit-report-max-results=50"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
		t.Error("metrics disabled, but the container has a metrics port")
	}
	svc := typed[corev1.Service](t, objs, "Service", "shepherd-webhook")
	if slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
		t.Error("metrics disabled, but the Service has a metrics port")
	}
	// 80% of 1Gi, in whole KiB.
	if got, want := goMemLimitBytes(t, c), int64(1<<30)*80/100/1024*1024; got != want {
		t.Errorf("GOMEMLIMIT %d bytes, want %d", got, want)
	}
	if e := envVar(c, "GOGC"); e == nil || e.Value != "200" {
		t.Errorf("extraEnv GOGC = %+v", e)
	}
	if !c.Resources.Limits.Cpu().Equal(resource.MustParse("2")) || !c.Resources.Requests.Memory().Equal(resource.MustParse("128Mi")) {
		t.Errorf("resources %+v: want the CPU limit set and the memory request kept from the defaults", c.Resources)
	}

	checkWebhooks(t, objs, customNS, admissionregistrationv1.Ignore, 10, []string{"kube-system", "kube-node-lease", "gpu-operator", customNS})
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range install.Find(objs, kind, "") {
			b := typed[rbacv1.RoleBinding](t, objs, kind, o.GetName())
			for _, s := range b.Subjects {
				if s.Namespace != customNS {
					t.Errorf("%s %s binds %s/%s, want the ServiceAccount in %s", kind, b.Name, s.Namespace, s.Name, customNS)
				}
			}
		}
	}
	if !strings.Contains(rel.Info.Notes, "One replica: no PodDisruptionBudget") || strings.Contains(rel.Info.Notes, "Metrics:") {
		t.Errorf("NOTES.txt does not follow the values:\n%s", rel.Info.Notes)
	}
}

// TestCertManagerElsewhere: the serving Certificate's names and the
// inject-ca-from annotations follow the release namespace.
func TestCertManagerElsewhere(t *testing.T) {
	_, objs := render(t, valueSetNamed(t, "cert-manager-elsewhere"))
	crt := install.Find(objs, "Certificate", "shepherd-webhook")
	if len(crt) != 1 {
		t.Fatalf("%d serving Certificates", len(crt))
	}
	names, _, _ := unstructured.NestedStringSlice(crt[0].Object, "spec", "dnsNames")
	if want := certs.ServiceDNSNames("shepherd-webhook", customNS); !slices.Equal(names, want) {
		t.Errorf("dnsNames %v, want %v", names, want)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		for _, o := range install.Find(objs, kind, "") {
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != customNS+"/shepherd-webhook" {
				t.Errorf("%s inject-ca-from %q", kind, got)
			}
		}
	}
	for _, kind := range []string{"Role", "ClusterRole"} {
		for _, o := range install.Find(objs, kind, "") {
			if strings.HasSuffix(o.GetName(), "certs") || o.GetName() == "shepherd-webhook-configurations" {
				t.Errorf("cert-manager mode renders %s %s: shepherd writes no Secret or webhook configuration then", kind, o.GetName())
			}
		}
	}
	checkWebhooks(t, objs, customNS, admissionregistrationv1.Fail, 5, []string{"kube-system", customNS})
}

func checkWebhooks(t *testing.T, objs []*unstructured.Unstructured, ns string, fp admissionregistrationv1.FailurePolicyType, timeout int32, excluded []string) {
	t.Helper()
	m := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", certs.DefaultMutatingWebhook)
	v := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "shepherd")
	type hook struct {
		name string
		cc   admissionregistrationv1.WebhookClientConfig
		fp   *admissionregistrationv1.FailurePolicyType
		to   *int32
		ns   []string
	}
	var hooks []hook
	for _, w := range m.Webhooks {
		hooks = append(hooks, hook{w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, w.NamespaceSelector.MatchExpressions[0].Values})
	}
	for _, w := range v.Webhooks {
		ns := excluded // WorkloadPolicies are cluster-scoped: no namespaceSelector
		if w.NamespaceSelector != nil {
			ns = w.NamespaceSelector.MatchExpressions[0].Values
		} else if w.Name != api.PolicyWebhookName {
			ns = nil
		}
		hooks = append(hooks, hook{w.Name, w.ClientConfig, w.FailurePolicy, w.TimeoutSeconds, ns})
	}
	if len(hooks) != 3 {
		t.Fatalf("%d webhooks, want 3 (defaults, workloads, WorkloadPolicies)", len(hooks))
	}
	for _, h := range hooks {
		if h.cc.Service == nil || h.cc.Service.Namespace != ns || h.cc.Service.Name != "shepherd-webhook" {
			t.Errorf("webhook %s calls %+v, want shepherd-webhook in %s", h.name, h.cc.Service, ns)
		}
		if *h.fp != fp || *h.to != timeout {
			t.Errorf("webhook %s: failurePolicy %s, timeout %d; want %s and %d", h.name, *h.fp, *h.to, fp, timeout)
		}
		if !slices.Equal(h.ns, excluded) {
			t.Errorf("webhook %s excludes %v, want %v", h.name, h.ns, excluded)
		}
	}
}

// TestSchemaTypesEveryValue: every value in values.yaml has a type in
// values.schema.json, and every object of named fields (the top level
// included) allows no other field.
func TestSchemaTypesEveryValue(t *testing.T) {
	c := loadChart(t)
	var schema map[string]any
	if err := json.Unmarshal(c.Schema, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema %v, want draft-07", schema["$schema"])
	}
	defs, _ := schema["definitions"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			d, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
			return d
		}
		return s
	}
	checked := 0
	var walk func(path string, s map[string]any, v any)
	walk = func(path string, s map[string]any, v any) {
		s = resolve(s)
		if s == nil || s["type"] == nil {
			t.Errorf("%s has no type in values.schema.json", path)
			return
		}
		checked++
		props, named := s["properties"].(map[string]any)
		if !named {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s allows fields the schema does not name", path)
		}
		vals, _ := v.(map[string]any)
		for k, sub := range vals {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s is in values.yaml but not in values.schema.json", path, k)
				continue
			}
			walk(path+"."+k, ps, sub)
		}
	}
	walk("values", schema, c.Values)
	if checked < 30 {
		t.Errorf("only %d values checked", checked)
	}
}

// TestSubchartOnARestrictedPlatform (issue 33): the chart installs as a
// subchart (Helm passes the parent's `global` values) and on a platform
// that assigns the user itself (OpenShift's restricted SCC): a
// podSecurityContext with its IDs removed renders none and keeps
// runAsNonRoot, and the container keeps its hardened securityContext. The
// defaults still run as 65532.
func TestSubchartOnARestrictedPlatform(t *testing.T) {
	podSC := func(vs valueSet) (*corev1.PodSecurityContext, *corev1.SecurityContext) {
		_, objs := render(t, vs)
		dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
		return dep.Spec.Template.Spec.SecurityContext, dep.Spec.Template.Spec.Containers[0].SecurityContext
	}
	pod, ctr := podSC(valueSet{name: "restricted", namespace: defaultNS, values: map[string]any{
		"global": map[string]any{"imageRegistry": "registry.example.com"},
		// Helm merges maps: null removes a default key.
		"podSecurityContext": map[string]any{"runAsUser": nil, "runAsGroup": nil, "fsGroup": nil},
	}})
	if pod == nil || pod.RunAsUser != nil || pod.RunAsGroup != nil || pod.FSGroup != nil || !ptr.Deref(pod.RunAsNonRoot, false) {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and no user, group or fsGroup", pod)
	}
	if ctr == nil || !ptr.Deref(ctr.ReadOnlyRootFilesystem, false) || ptr.Deref(ctr.AllowPrivilegeEscalation, true) || ctr.Capabilities == nil || len(ctr.Capabilities.Drop) != 1 {
		t.Errorf("container securityContext %+v: want the hardened defaults", ctr)
	}
	pod, _ = podSC(valueSetNamed(t, "defaults"))
	if pod == nil || ptr.Deref(pod.RunAsUser, 0) != 65532 || ptr.Deref(pod.FSGroup, 0) != 65532 {
		t.Errorf("default pod securityContext %+v: want user and fsGroup 65532", pod)
	}
}

// TestPlacementAndIdentityValues (issue 33, item 3): the values a platform
// team sets to place and identify shepherd's pods — podLabels beside the
// selector's, a full affinity replacing the podAntiAffinity preset,
// topologySpreadConstraints, the update strategy, and annotations on the
// ServiceAccount for a workload identity — render where they belong; the
// defaults keep the preset and the surge-first rollout; a bad strategy is
// refused by the schema.
func TestPlacementAndIdentityValues(t *testing.T) {
	zone := map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
	affinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"system"}}}}}}}}
	_, objs := render(t, valueSet{name: "placed", namespace: defaultNS, values: map[string]any{
		"podLabels":                 map[string]any{"team": "platform"},
		"affinity":                  affinity,
		"topologySpreadConstraints": []any{zone},
		"updateStrategy":            map[string]any{"type": "Recreate", "rollingUpdate": nil},
		"serviceAccount":            map[string]any{"annotations": map[string]any{"iam.gke.io/gcp-service-account": "shepherd@p.iam.gserviceaccount.com"}},
	}})
	dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	pod := dep.Spec.Template
	if pod.Labels["team"] != "platform" || pod.Labels["app.kubernetes.io/name"] == "" {
		t.Errorf("pod labels %v: want team=platform beside the selector's", pod.Labels)
	}
	if a := pod.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity != nil {
		t.Errorf("affinity %+v: want the given node affinity in place of the preset", a)
	}
	if c := pod.Spec.TopologySpreadConstraints; len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("topologySpreadConstraints %+v", c)
	}
	if s := dep.Spec.Strategy; s.Type != appsv1.RecreateDeploymentStrategyType || s.RollingUpdate != nil {
		t.Errorf("strategy %+v: want Recreate", s)
	}
	sa := typed[corev1.ServiceAccount](t, objs, "ServiceAccount", "shepherd")
	if sa.Annotations["iam.gke.io/gcp-service-account"] == "" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}

	_, objs = render(t, valueSetNamed(t, "defaults"))
	dep = typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	if a := dep.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Errorf("default affinity %+v: want the podAntiAffinity preset", a)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("default strategy %+v: want maxUnavailable 0, maxSurge 1", dep.Spec.Strategy)
	}

	c := loadChart(t)
	if _, err := renderErr(c, valueSet{name: "bad", namespace: defaultNS, values: map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}}}); err == nil || !strings.Contains(err.Error(), "updateStrategy") {
		t.Errorf("updateStrategy OnDelete (a StatefulSet's): %v, want a schema error naming it", err)
	}
}

// TestMemoryLimitUnits (issue 33): the memory limit takes the suffixes an
// admin writes — 1G was refused with the schema's regex as the message —
// and GOMEMLIMIT is goMemLimitPercent of it in whole KiB.
func TestMemoryLimitUnits(t *testing.T) {
	for limit, bytes := range map[string]int64{"1G": 1e9, "512Mi": 512 << 20, "2Gi": 2 << 30, "800M": 800e6, "536870912": 1 << 29} {
		_, objs := render(t, valueSet{name: "memory", namespace: defaultNS, values: map[string]any{
			"resources": map[string]any{"limits": map[string]any{"memory": limit}}}})
		c := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd").Spec.Template.Spec.Containers[0]
		if got, want := goMemLimitBytes(t, c), bytes*80/100/1024*1024; got != want {
			t.Errorf("limit %s: GOMEMLIMIT %d bytes, want %d", limit, got, want)
		}
	}
}

// TestWebhookObjectSelector (issue 33): webhook.objectSelector narrows every
// webhook of both admission modes to the objects it picks; unset, no
// webhook has one. The WorkloadPolicy webhook keeps its own.
func TestWebhookObjectSelector(t *testing.T) {
	sel := map[string]any{"matchExpressions": []any{map[string]any{"key": "shepherd.dev/skip", "operator": "DoesNotExist"}}}
	for _, mode := range []string{"webhook", "native"} {
		for _, set := range []map[string]any{nil, sel} {
			_, objs := render(t, valueSet{name: "selector", namespace: defaultNS, values: map[string]any{
				"admission": map[string]any{"mode": mode}, "webhook": map[string]any{"objectSelector": set}}})
			n := 0
			for _, o := range objs {
				if o.GetKind() != "MutatingWebhookConfiguration" && o.GetKind() != "ValidatingWebhookConfiguration" {
					continue
				}
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for _, h := range hooks {
					if h.(map[string]any)["name"] == api.PolicyWebhookName {
						continue // WorkloadPolicies: the admin's selector is for workloads
					}
					n++
					got, has := h.(map[string]any)["objectSelector"]
					if (set == nil) == has {
						t.Errorf("%s mode, selector %v: %s webhook objectSelector %v", mode, set, o.GetName(), got)
					}
				}
			}
			if n == 0 {
				t.Errorf("%s mode: no webhooks rendered", mode)
			}
		}
	}
}

// TestProbeTimings (issue 33): the probes' timings are values, merged field
// by field over the defaults; their endpoints stay /healthz and /readyz; a
// period of 0 is refused by the schema.
func TestProbeTimings(t *testing.T) {
	_, objs := render(t, valueSet{name: "probes", namespace: defaultNS, values: map[string]any{
		"probes": map[string]any{"liveness": map[string]any{"timeoutSeconds": 10}, "startup": map[string]any{"failureThreshold": 150}}}})
	c := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd").Spec.Template.Spec.Containers[0]
	if p := c.LivenessProbe; p == nil || p.TimeoutSeconds != 10 || p.PeriodSeconds != 10 || p.FailureThreshold != 3 || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v: want timeout 10 with the other defaults, on /healthz", p)
	}
	if p := c.StartupProbe; p == nil || p.FailureThreshold != 150 || p.PeriodSeconds != 2 {
		t.Errorf("startup probe %+v", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.PeriodSeconds != 5 || p.FailureThreshold != 2 {
		t.Errorf("readiness probe %+v: want the defaults on /readyz", p)
	}
	if _, err := renderErr(loadChart(t), valueSet{name: "bad", namespace: defaultNS, values: map[string]any{
		"probes": map[string]any{"readiness": map[string]any{"periodSeconds": 0}}}}); err == nil || !strings.Contains(err.Error(), "periodSeconds") {
		t.Errorf("readiness periodSeconds 0: %v, want a schema error naming it", err)
	}
}
