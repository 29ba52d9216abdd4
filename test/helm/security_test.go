package helm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/shepherd-k8s/shepherd/test/install"
)

// clientCAArg is the flag webhook.clientCA.enabled adds.
const clientCAArg = "--webhook-client-ca=/etc/shepherd/client-ca/ca.crt"

// TestClientCA: webhook.clientCA.enabled passes --webhook-client-ca and
// mounts the CA bundle from the ConfigMap (not optional: without it the
// pod must not start, rather than serve unauthenticated); off, neither.
func TestClientCA(t *testing.T) {
	for _, tc := range []struct {
		set            string
		on             bool
		configMap, key string
	}{
		{"defaults", false, "", ""},
		{"client-ca", true, "shepherd-webhook-client-ca", "ca.crt"},
		{"security-elsewhere", true, "apiserver-client-ca", "bundle.pem"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, objs := render(t, valueSetNamed(t, tc.set))
			pod := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd").Spec.Template.Spec
			c := pod.Containers[0]
			if got := slices.Contains(c.Args, clientCAArg); got != tc.on {
				t.Errorf("args %v: %s present %v, want %v", c.Args, clientCAArg, got, tc.on)
			}
			i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "client-ca" })
			m := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "client-ca" })
			if !tc.on {
				if i >= 0 || m >= 0 {
					t.Errorf("client CA off, but volume %d / mount %d rendered", i, m)
				}
				return
			}
			if i < 0 || m < 0 {
				t.Fatalf("client CA on, but volume %d / mount %d", i, m)
			}
			want := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: tc.configMap},
				Items:                []corev1.KeyToPath{{Key: tc.key, Path: "ca.crt"}},
			}}
			if d := cmp.Diff(want, pod.Volumes[i].VolumeSource); d != "" {
				t.Errorf("client-ca volume (-want +got):\n%s", d)
			}
			if mt := c.VolumeMounts[m]; mt.MountPath != "/etc/shepherd/client-ca" || !mt.ReadOnly {
				t.Errorf("client-ca mount %+v, want /etc/shepherd/client-ca read-only (the flag's directory)", mt)
			}
		})
	}
}

// TestNetworkPolicy: off by default; on, ingress only to the webhook port
// and (with metrics) the metrics port, from the peers given or any.
func TestNetworkPolicy(t *testing.T) {
	tcp := corev1.ProtocolTCP
	rule := func(port int, from ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
		p := intstr.FromInt32(int32(port))
		return networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: &p, Protocol: &tcp}}, From: from}
	}
	for _, tc := range []struct {
		set  string
		want []networkingv1.NetworkPolicyIngressRule // nil: no NetworkPolicy
	}{
		{"defaults", nil},
		{"network-policy", []networkingv1.NetworkPolicyIngressRule{rule(9443), rule(8443)}},
		{"security-elsewhere", []networkingv1.NetworkPolicyIngressRule{
			rule(9443, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}),
			rule(8443, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}),
		}},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, objs := render(t, valueSetNamed(t, tc.set))
			nps := install.Find(objs, "NetworkPolicy", "")
			if tc.want == nil {
				if len(nps) != 0 {
					t.Errorf("%d NetworkPolicies rendered by default", len(nps))
				}
				return
			}
			np := typed[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "shepherd")
			dep := typed[appsv1.Deployment](t, objs, "Deployment", "shepherd")
			if d := cmp.Diff(dep.Spec.Selector, &np.Spec.PodSelector); d != "" {
				t.Errorf("podSelector is not the Deployment's selector (-deployment +policy):\n%s", d)
			}
			if d := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); d != "" {
				t.Errorf("policyTypes (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, np.Spec.Ingress); d != "" {
				t.Errorf("ingress rules (-want +got):\n%s", d)
			}
			// The ports are the container's.
			for _, r := range np.Spec.Ingress {
				port := r.Ports[0].Port.IntValue()
				if !slices.ContainsFunc(dep.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == port }) {
					t.Errorf("the NetworkPolicy admits port %d, which the container does not serve", port)
				}
			}
		})
	}
	// Without metrics, only the webhook port.
	vs := valueSetNamed(t, "network-policy")
	vs.values = map[string]any{"networkPolicy": map[string]any{"enabled": true}, "metrics": map[string]any{"enabled": false}}
	_, objs := render(t, vs)
	np := typed[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "shepherd")
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 9443 {
		t.Errorf("metrics off: ingress %+v, want the webhook port only", np.Spec.Ingress)
	}
}

// TestSecuritySchema: the new values are typed; a wrong type or an unknown
// field fails the install, naming the value.
func TestSecuritySchema(t *testing.T) {
	c := loadChart(t)
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"clientCA.enabled as a string":      {map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"enabled": "true"}}}, "enabled"},
		"clientCA unknown field":            {map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"secret": "x"}}}, "secret"},
		"clientCA configMap not a name":     {map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"configMap": "Client CA"}}}, "configMap"},
		"networkPolicy.enabled as a string": {map[string]any{"networkPolicy": map[string]any{"enabled": "yes"}}, "enabled"},
		"ingressFrom not a list":            {map[string]any{"networkPolicy": map[string]any{"ingressFrom": "10.0.0.0/8"}}, "ingressFrom"},
		"ingressFrom peer misspelt":         {map[string]any{"networkPolicy": map[string]any{"ingressFrom": []any{map[string]any{"ipblock": map[string]any{"cidr": "10.0.0.0/8"}}}}}, "ipblock"},
		"metricsIngressFrom empty peer":     {map[string]any{"networkPolicy": map[string]any{"metricsIngressFrom": []any{map[string]any{}}}}, "metricsIngressFrom"},
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
