package helm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// testHooks decodes the release's `helm test` hooks, failing on a hook of
// another event.
func testHooks(t *testing.T, rel *release.Release) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, h := range rel.Hooks {
		if !slices.Contains(h.Events, release.HookTest) {
			t.Errorf("hook %s (%s) runs on %v, not helm test", h.Name, h.Kind, h.Events)
			continue
		}
		objs, err := decodeManifest(h.Manifest)
		if err != nil || len(objs) != 1 {
			t.Fatalf("hook %s: %d objects, %v", h.Name, len(objs), err)
		}
		out = append(out, objs...)
	}
	return out
}

func fromUnstructured[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("decoding %s: %v", key(o), err)
	}
	return out
}

// TestHelmTestHook (issue 33): `helm test` runs a Pod, annotated as a test
// hook, that checks shepherd answers admission through the apiserver.
// The Pod meets the restricted Pod Security level (asserted field by field
// and by the apiserver's own PodSecurity admission), is selected by none of
// the webhook pods' selectors (Service, PodDisruptionBudget,
// NetworkPolicy), and runs as a ServiceAccount that may only create the
// three kinds it dry-runs in tests.namespace. The hooks are not part of the
// installed manifest, are deleted once they succeed, and the script parses.
func TestHelmTestHook(t *testing.T) {
	vs := valueSet{name: "helm-test", namespace: defaultNS, values: map[string]any{"networkPolicy": map[string]any{"enabled": true}}}
	rel, objs := render(t, vs)
	for _, o := range objs {
		if o.GetAnnotations()["helm.sh/hook"] != "" {
			t.Errorf("%s is a hook in the installed manifest", key(o))
		}
	}
	hooks := testHooks(t, rel)
	kinds := map[string]*unstructured.Unstructured{}
	for _, h := range hooks {
		kinds[h.GetKind()] = h
		a := h.GetAnnotations()
		if a["helm.sh/hook"] != "test" {
			t.Errorf("%s: helm.sh/hook %q, want test", key(h), a["helm.sh/hook"])
		}
		if p := strings.Split(a["helm.sh/hook-delete-policy"], ","); !slices.Contains(p, "hook-succeeded") || !slices.Contains(p, "before-hook-creation") {
			t.Errorf("%s: hook-delete-policy %q, want before-hook-creation and hook-succeeded", key(h), a["helm.sh/hook-delete-policy"])
		}
	}
	for _, k := range []string{"Pod", "ServiceAccount", "Role", "RoleBinding"} {
		if kinds[k] == nil {
			t.Fatalf("no %s test hook rendered; hooks: %v", k, hooks)
		}
	}
	if w := kinds["Pod"].GetAnnotations()["helm.sh/hook-weight"]; w <= kinds["Role"].GetAnnotations()["helm.sh/hook-weight"] {
		t.Errorf("the Pod's hook weight %q is not after its RBAC's: it could start before it may create anything", w)
	}

	pod := fromUnstructured[corev1.Pod](t, kinds["Pod"])
	if pod.Namespace != defaultNS || pod.Spec.RestartPolicy != corev1.RestartPolicyNever || len(pod.Spec.Containers) != 1 {
		t.Errorf("pod %s/%s restartPolicy %s, %d containers", pod.Namespace, pod.Name, pod.Spec.RestartPolicy, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	psc := pod.Spec.SecurityContext
	if psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	sc := c.SecurityContext
	if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || ptr.Deref(sc.Privileged, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v: want no privilege escalation, unprivileged, read-only root, all capabilities dropped", sc)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("the test container has no memory limit")
	}
	if !strings.HasPrefix(c.Image, "registry.k8s.io/kubectl:v") {
		t.Errorf("image %s, want the kubectl image by default", c.Image)
	}

	// None of the webhook pods' selectors picks the test pod.
	podLabels := labels.Set(pod.Labels)
	dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
	svc := typed[corev1.Service](t, objs, "Service", "shepherd-webhook")
	pdb := typed[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "shepherd")
	np := typed[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "shepherd")
	for what, sel := range map[string]*metav1.LabelSelector{"Deployment": dep.Spec.Selector, "PodDisruptionBudget": pdb.Spec.Selector, "NetworkPolicy": &np.Spec.PodSelector} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		if s.Matches(podLabels) {
			t.Errorf("the %s's selector %s picks the test pod (labels %v)", what, s, pod.Labels)
		}
	}
	if labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service sends admissions to the test pod (labels %v)", pod.Labels)
	}

	// Its ServiceAccount may create the three kinds in tests.namespace, and
	// nothing else.
	sa := fromUnstructured[corev1.ServiceAccount](t, kinds["ServiceAccount"])
	role := fromUnstructured[rbacv1.Role](t, kinds["Role"])
	rb := fromUnstructured[rbacv1.RoleBinding](t, kinds["RoleBinding"])
	if pod.Spec.ServiceAccountName != sa.Name || sa.Namespace != defaultNS {
		t.Errorf("the pod runs as %q, the test ServiceAccount is %s/%s", pod.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if role.Namespace != "default" || rb.Namespace != "default" || rb.RoleRef.Name != role.Name ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != defaultNS {
		t.Errorf("role %s/%s bound by %s/%s to %+v: want the test ServiceAccount bound in tests.namespace default", role.Namespace, role.Name, rb.Namespace, rb.Name, rb.Subjects)
	}
	var granted []string
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"create"}) || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("test role rule %+v: want create only", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				granted = append(granted, res+"."+g)
			}
		}
	}
	slices.Sort(granted)
	if want := []string{"jobsets.jobset.x-k8s.io", "podcliquesets.grove.io", "trainingruntimes.trainer.kubeflow.org"}; !slices.Equal(granted, want) {
		t.Errorf("the test role grants %v, want %v", granted, want)
	}

	// The script parses, and names the three kinds and shepherd's rules.
	if len(c.Command) != 2 || c.Command[0] != "/bin/bash" || len(c.Args) != 1 {
		t.Fatalf("command %v args %d: want a bash script", c.Command, len(c.Args))
	}
	script := filepath.Join(t.TempDir(), "test.sh")
	if err := os.WriteFile(script, []byte(c.Args[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("the test script does not parse: %v\n%s", err, out)
	}
	for _, want := range []string{"kubectl create --dry-run=server", "V-TR-1", "V-PCS-1", "D-JS-2"} {
		if !strings.Contains(c.Args[0], want) {
			t.Errorf("the test script lacks %q", want)
		}
	}

	// The apiserver admits the hooks, the Pod in a namespace that enforces
	// the restricted Pod Security level.
	ctx := context.Background()
	restricted := "helm-test-restricted"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restricted, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := env.Client.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	ensureNamespace(t, defaultNS)
	for _, h := range hooks {
		h = h.DeepCopy()
		if h.GetKind() == "Pod" {
			h.SetNamespace(restricted)
		}
		if err := env.Client.Create(ctx, h, client.DryRunAll); err != nil {
			t.Errorf("%s rejected: %v", key(h), err)
		}
	}
}

// TestHelmTestValues: tests.enabled false renders no hook; tests.namespace
// moves the RBAC and the dry runs; a namespace the webhooks never see is
// refused, naming the value; webhook.objectSelector's labels go on the
// test objects; the image is a value.
func TestHelmTestValues(t *testing.T) {
	rel, _ := render(t, valueSet{name: "off", namespace: defaultNS, values: map[string]any{"tests": map[string]any{"enabled": false}}})
	if len(rel.Hooks) != 0 {
		t.Errorf("tests.enabled false renders %d hooks", len(rel.Hooks))
	}

	rel, _ = render(t, valueSet{name: "moved", namespace: customNS, values: map[string]any{
		"tests":   map[string]any{"namespace": "ml-jobs", "image": map[string]any{"repository": "mirror.example.com/kubectl", "tag": "v1.36.0"}},
		"webhook": map[string]any{"objectSelector": map[string]any{"matchLabels": map[string]any{"shepherd.dev/enforce": "true"}}},
	}})
	for _, h := range testHooks(t, rel) {
		switch h.GetKind() {
		case "Role", "RoleBinding":
			if h.GetNamespace() != "ml-jobs" {
				t.Errorf("%s not in tests.namespace ml-jobs", key(h))
			}
		case "Pod":
			pod := fromUnstructured[corev1.Pod](t, h)
			c := pod.Spec.Containers[0]
			if c.Image != "mirror.example.com/kubectl:v1.36.0" {
				t.Errorf("image %s", c.Image)
			}
			if e := envVar(c, "NAMESPACE"); e == nil || e.Value != "ml-jobs" {
				t.Errorf("NAMESPACE %+v, want ml-jobs", e)
			}
			if e := envVar(c, "LABELS"); e == nil || e.Value != `{"shepherd.dev/enforce":"true"}` {
				t.Errorf("LABELS %+v, want the objectSelector's matchLabels", e)
			}
		}
	}

	c := loadChart(t)
	for _, ns := range []string{"kube-system", defaultNS} {
		_, err := renderErr(c, valueSet{name: "excluded", namespace: defaultNS, values: map[string]any{"tests": map[string]any{"namespace": ns}}})
		if err == nil || !strings.Contains(err.Error(), "tests.namespace") {
			t.Errorf("tests.namespace %s, which the webhooks never see: %v, want an error naming tests.namespace", ns, err)
		}
	}
	if _, err := renderErr(c, valueSet{name: "bad", namespace: defaultNS, values: map[string]any{"tests": map[string]any{"namespace": "Not_A_Namespace"}}}); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("an invalid tests.namespace: %v, want a schema error", err)
	}
}
