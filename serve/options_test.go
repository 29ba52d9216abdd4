package serve

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/background"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/leader"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// parsed is serve's options after parsing args on its flags.
func parsed(t *testing.T, args ...string) *Options {
	t.Helper()
	o := DefaultOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	o.LogTo(io.Discard)
	return o
}

// TestFlagDefaults: the defaults the flags declare and docs promise, and
// the ones set outside DefaultOptions (in the flags of audit.go,
// updatefilter.go, frameworks.go and the --defer-to-upstream flag).
func TestFlagDefaults(t *testing.T) {
	o := parsed(t)
	if !o.leaderElect || o.leaseDuration != 15*time.Second || o.renewDeadline != 10*time.Second || o.retryPeriod != 2*time.Second || o.leaderElectionID != "shepherd.shepherd.dev" {
		t.Errorf("leader election defaults: %v %v %v %v %q", o.leaderElect, o.leaseDuration, o.renewDeadline, o.retryPeriod, o.leaderElectionID)
	}
	if !o.deferToUpstream || !o.updateFilter.enabled || !o.updateFilter.work {
		t.Errorf("--defer-to-upstream %v, --skip-unread-updates %v, --skip-requests-without-work %v; want all true", o.deferToUpstream, o.updateFilter.enabled, o.updateFilter.work)
	}
	if b := o.backgroundAudit; b.interval != 10*time.Minute || !b.reports || b.cpuShare != background.DefaultCPUShare {
		t.Errorf("background audit defaults: %+v", b)
	}
	if o.native.mode != admissionModeWebhook || o.webhookPort != 9443 || o.certDir != certs.DefaultCertDir || !o.metricsSecure || o.metricsAddr != ":8443" {
		t.Errorf("serving defaults: mode %q port %d certDir %q metrics %q secure %v", o.native.mode, o.webhookPort, o.certDir, o.metricsAddr, o.metricsSecure)
	}
	for name, mode := range o.frameworks.modes() {
		if mode != integrations.ModeAuto {
			t.Errorf("--framework-%s defaults to %q, want auto", name, mode)
		}
	}
	if len(o.frameworks) != len(integrations.Frameworks) {
		t.Errorf("%d framework flags for %d frameworks", len(o.frameworks), len(integrations.Frameworks))
	}
	if o.certs.Mode != certs.ModeSelfSigned || o.certs.SecretName != certs.DefaultSecretName {
		t.Errorf("certificate defaults: %+v", o.certs)
	}
}

// TestFlagsBind: each flag sets the option it names, and the leader
// election flags reach the elector's options.
func TestFlagsBind(t *testing.T) {
	o := parsed(t,
		"--framework-trainer=on", "--framework-grove=off",
		"--leader-election-id=lease", "--leader-election-namespace=ns", "--leader-election-lease-duration=30s",
		"--leader-election-renew-deadline=20s", "--leader-election-retry-period=3s",
		"--disable-rule=V-JS-5,D-PCS-6", "--disable-rules=V-TJ-3", "--feature=trainjob-deadline=off",
		"--admission-mode=native", "--audit-sink-token-file=/token", "--audit-interval=0", "--audit-cpu-share=0.5",
		"--skip-unread-updates=false", "--cert-mode=cert-manager", "--webhook-max-connections-per-client=7")
	if diff := cmp.Diff(map[string]integrations.Mode{"trainer": "on", "jobset": "auto", "grove": "off"}, o.frameworks.modes()); diff != "" {
		t.Errorf("framework modes (-want +got):\n%s", diff)
	}
	want := leader.ElectionOptions{ID: "lease", Namespace: "ns", LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 3 * time.Second}
	if diff := cmp.Diff(want, o.election()); diff != "" {
		t.Errorf("election options (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"V-JS-5", "D-PCS-6", "V-TJ-3"}, o.disabledRules); diff != "" {
		t.Errorf("disabled rules (-want +got):\n%s", diff)
	}
	if o.features["trainjob-deadline"] != "off" || o.native.mode != admissionModeNative || o.native.tokenFile != "/token" ||
		o.backgroundAudit.interval != 0 || o.backgroundAudit.cpuShare != 0.5 || o.updateFilter.enabled || o.certs.Mode != certs.ModeCertManager ||
		o.webhook.MaxConnectionsPerClient != 7 {
		t.Errorf("parsed options: features %v native %+v audit %+v update filter %+v cert mode %q per-client %d",
			o.features, o.native, o.backgroundAudit, o.updateFilter, o.certs.Mode, o.webhook.MaxConnectionsPerClient)
	}

	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	DefaultOptions().AddFlags(fs)
	if err := fs.Parse([]string{"--framework-jobset=sometimes"}); err == nil {
		t.Error("--framework-jobset=sometimes was accepted")
	}
}

// TestRulesConfig: the built-in rules' configuration from the flags;
// shepherd's own webhook configurations are never taken for upstream
// ones, and D-PCS-5's delay is set only when positive.
func TestRulesConfig(t *testing.T) {
	o := parsed(t, "--disable-rule=V-JS-5", "--disable-startup-policy-rewrite", "--defer-to-upstream=false",
		"--validating-webhook-configuration=v", "--mutating-webhook-configuration=m")
	want := celrules.Config{DisabledRules: []string{"V-JS-5"}, DisableStartupPolicyRewrite: true, StandDown: false, OwnWebhooks: []string{"v", "m"}}
	if diff := cmp.Diff(want, o.rulesConfig()); diff != "" {
		t.Errorf("rules config (-want +got):\n%s", diff)
	}
	o = parsed(t, "--inference-termination-delay=90s")
	if got := o.rulesConfig(); got.InferenceTerminationDelay == nil || got.InferenceTerminationDelay.Duration != 90*time.Second || !got.StandDown {
		t.Errorf("--inference-termination-delay=90s: %+v", got)
	}
}

// TestRunRejectsBadOptions: Run refuses options that cannot work before it
// reaches for the apiserver, naming the flag.
func TestRunRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"renew deadline past the lease duration", []string{"--leader-election-renew-deadline=20s"}, "--leader-election-renew-deadline (20s) < --leader-election-lease-duration (15s)"},
		{"retry period past the renew deadline", []string{"--leader-election-retry-period=10s"}, "0 < --leader-election-retry-period (10s)"},
		{"no retry period", []string{"--leader-election-retry-period=0s"}, "--leader-election-retry-period (0s)"},
		{"no policy allowed", []string{"--max-workload-policies=0"}, "--max-workload-policies=0"},
		{"audit CPU share of zero", []string{"--audit-cpu-share=0"}, "--audit-cpu-share=0"},
		{"audit CPU share above one", []string{"--audit-cpu-share=1.5"}, "--audit-cpu-share=1.5"},
		{"unknown admission mode", []string{"--admission-mode=vap"}, `--admission-mode must be webhook or native, got "vap"`},
		{"unknown rule", []string{"--disable-rule=V-NOPE-1"}, "V-NOPE-1"},
		{"kubeconfig that does not exist", []string{"--kubeconfig=/nonexistent/kubeconfig"}, "--kubeconfig /nonexistent/kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), parsed(t, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The timings matter only with leader election.
	err := Run(context.Background(), parsed(t, "--leader-elect=false", "--leader-election-retry-period=0s", "--max-workload-policies=0"))
	if err == nil || !strings.Contains(err.Error(), "--max-workload-policies") {
		t.Errorf("--leader-elect=false: Run = %v, want the timings not judged", err)
	}
}

// TestRestConfig: a kubeconfig given is read, and the client's rate
// limits come from the flags.
func TestRestConfig(t *testing.T) {
	path := testkit.WriteFile(t, t.TempDir(), "kubeconfig", `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
	o := parsed(t, "--kubeconfig="+path, "--kube-api-qps=12.5", "--kube-api-burst=30")
	cfg, err := o.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "secret" || cfg.QPS != 12.5 || cfg.Burst != 30 {
		t.Errorf("rest config: host %q token %q QPS %v burst %d", cfg.Host, cfg.BearerToken, cfg.QPS, cfg.Burst)
	}
}

// TestWebhookServing: the webhook server's options carry the listener
// flags and the read timeout and connection caps, and HTTP/2 only when
// enabled.
func TestWebhookServing(t *testing.T) {
	o := parsed(t, "--webhook-host=127.0.0.1", "--webhook-port=10443", "--cert-dir=/certs", "--webhook-read-timeout=3s",
		"--webhook-max-connections=9", "--webhook-client-ca=/ca.pem")
	s := webhookServing(o, logr.Discard())
	if s.Host != "127.0.0.1" || s.Port != 10443 || s.CertDir != "/certs" || s.ReadTimeout != 3*time.Second || s.MaxConnections != 9 || s.ClientCAFile != "/ca.pem" {
		t.Errorf("serving options %+v", s)
	}
	if len(s.TLSOpts) != len(server.TLSOptions(false)) {
		t.Errorf("%d TLS options, want those of HTTP/1.1 only (%d)", len(s.TLSOpts), len(server.TLSOptions(false)))
	}
}

// TestClientAndCacheOptions: unstructured reads come from the cache; the
// cache holds only Grove's Pods and the frameworks' CRDs, without
// managedFields.
func TestClientAndCacheOptions(t *testing.T) {
	if c := ClientOptions().Cache; c == nil || !c.Unstructured {
		t.Errorf("client cache options %+v, want unstructured reads cached", c)
	}
	opts := cacheOptions()
	if opts.DefaultTransform == nil {
		t.Error("no transform: managedFields would be cached")
	}
	var pods, crds bool
	for obj, by := range opts.ByObject {
		switch obj.(type) {
		case *corev1.Pod:
			pods = true
			if by.Label == nil || !by.Label.Matches(labels.Set{api.LabelPodClique: "x"}) || by.Label.Matches(labels.Set{"app": "x"}) {
				t.Errorf("Pods cached by %v, want only those labelled %s", by.Label, api.LabelPodClique)
			}
		case *apiextensionsv1.CustomResourceDefinition:
			crds = true
		default:
			t.Errorf("cache narrowed for an unexpected %T", obj)
		}
	}
	if !pods || !crds {
		t.Errorf("cache narrowed for Pods %v, CRDs %v; want both", pods, crds)
	}
}

// TestAuditedKinds: the background audit judges every kind a framework
// admits, at the framework's version.
func TestAuditedKinds(t *testing.T) {
	f := integrations.Framework{Group: "grove.io", Version: "v1alpha1", Kinds: []string{"PodCliqueSet", "PodClique"}}
	want := []schema.GroupVersionKind{{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, {Group: "grove.io", Version: "v1alpha1", Kind: "PodClique"}}
	if diff := cmp.Diff(want, auditedKinds(f)); diff != "" {
		t.Errorf("audited kinds (-want +got):\n%s", diff)
	}
}

// TestSetupBackgroundAudit: --audit-interval=0 sets nothing up, and
// needs nothing; otherwise the chain must be able to audit.
func TestSetupBackgroundAudit(t *testing.T) {
	o := parsed(t, "--audit-interval=0")
	if err := setupBackgroundAudit(nil, o, nil, nil, nil, nil); err != nil {
		t.Errorf("--audit-interval=0: %v", err)
	}
	o = parsed(t)
	if err := setupBackgroundAudit(nil, o, nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "cannot run the background audit") {
		t.Errorf("a chain that cannot audit: %v", err)
	}
}
