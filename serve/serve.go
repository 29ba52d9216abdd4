package serve

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/leader"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/auditsink"
	"github.com/shepherd-k8s/shepherd/webhook/policies"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// Options are `shepherd serve`'s flags.
type Options struct {
	kubeconfig string
	kubeQPS    float32
	kubeBurst  int
	eventQPS   float32
	eventBurst int
	// maxPolicies is --max-workload-policies.
	maxPolicies int
	// PolicyViolation Events per namespace (audit.NamespaceLimiter).
	eventNamespaceQPS   float64
	eventNamespaceBurst int

	webhookHost  string
	webhookPort  int
	certDir      string
	enableHTTP2  bool
	maxBodyBytes int64
	webhook      server.ServingOptions // read timeout, connection cap, client CA
	maxInFlight  int
	maxBuffered  int64

	metricsAddr     string
	metricsSecure   bool
	metricsCertDir  string
	pprofAddr       string
	healthAddr      string
	shutdownDrain   time.Duration
	shutdownTimeout time.Duration

	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration

	auditRingSize     int
	auditDryRun       bool
	discoveryInterval time.Duration
	disableReconcile  bool

	disabledRules               []string
	disableStartupPolicyRewrite bool
	deferToUpstream             bool
	inferenceTerminationDelay   time.Duration

	frameworks frameworkModes
	features   map[string]string

	certs certs.Options

	updateFilter updateFilterOptions // updatefilter.go

	backgroundAudit backgroundAuditOptions // audit.go

	zap zap.Options

	native nativeOptions // native.go

	// Version is the version serve logs at start (cmd sets it from the
	// build).
	Version string
}

// election is the leader-election Lease and timings of the flags.
func (o *Options) election() leader.ElectionOptions {
	return leader.ElectionOptions{
		ID: o.leaderElectionID, Namespace: o.leaderElectionNamespace,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
	}
}

// DefaultOptions are serve's defaults, the flags' defaults.
func DefaultOptions() *Options {
	return &Options{
		kubeQPS:             200,
		maxPolicies:         policies.DefaultMaxPolicies,
		kubeBurst:           400,
		eventQPS:            events.DefaultQPS,
		eventBurst:          events.DefaultBurst,
		eventNamespaceQPS:   audit.DefaultEventNamespaceQPS,
		eventNamespaceBurst: audit.DefaultEventNamespaceBurst,
		webhookPort:         9443,
		certDir:             certs.DefaultCertDir,
		maxBodyBytes:        server.DefaultMaxBodyBytes,
		webhook:             server.ServingOptions{ReadTimeout: server.DefaultReadTimeout, MaxConnections: server.DefaultMaxConnections},
		maxInFlight:         server.DefaultMaxInFlight,
		maxBuffered:         server.DefaultMaxBufferedBytes,
		metricsAddr:         ":8443",
		metricsSecure:       true,
		healthAddr:          ":8081",
		shutdownDrain:       10 * time.Second,
		shutdownTimeout:     30 * time.Second,
		leaderElect:         true,
		leaseDuration:       15 * time.Second,
		renewDeadline:       10 * time.Second,
		retryPeriod:         2 * time.Second,
		leaderElectionID:    "shepherd.shepherd.dev",
		auditRingSize:       4096,
		auditDryRun:         true,
		discoveryInterval:   30 * time.Second,
		frameworks:          defaultFrameworkModes(),
		native:              nativeOptions{mode: admissionModeWebhook, maxSinkBytes: auditsink.DefaultMaxBodyBytes},
	}
}

// AddFlags defines serve's flags on fs, bound to o.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Path to a kubeconfig. Empty: $KUBECONFIG, the in-cluster service account, then ~/.kube/config.")
	fs.IntVar(&o.maxPolicies, "max-workload-policies", o.maxPolicies, "How many WorkloadPolicies a replica compiles and enforces. One more is not compiled: its status says Ready=False, reason TooManyPolicies, until others are deleted. Sized to the chart's 512Mi memory limit; raise both together.")
	fs.Float32Var(&o.kubeQPS, "kube-api-qps", o.kubeQPS, "Sustained rate of requests to the apiserver. Reconcilers patch status, write events and delete per expired deadline or breached gang; client-go's default of 5 would delay enforcement by minutes at a few thousand deadlines a minute.")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", o.kubeBurst, "Burst of requests to the apiserver above --kube-api-qps.")
	fs.Float32Var(&o.eventQPS, "event-qps", o.eventQPS, "Sustained rate of Events written (GangTerminated, PolicyViolation, ...), on a client of their own: Events over it wait and never delay the writes that enforce deadlines and gangs.")
	fs.IntVar(&o.eventBurst, "event-burst", o.eventBurst, "Burst of Events above --event-qps.")
	fs.Float64Var(&o.eventNamespaceQPS, "event-namespace-qps", o.eventNamespaceQPS, "Sustained rate of PolicyViolation Events per namespace; over it (and --event-namespace-burst) they are dropped and counted in shepherd_policy_violation_events_dropped_total, the verdicts still logged and served at /audit, so a flood of requests cannot fill a namespace's Events. 0 disables the bound.")
	fs.IntVar(&o.eventNamespaceBurst, "event-namespace-burst", o.eventNamespaceBurst, "PolicyViolation Events a namespace may get at once above --event-namespace-qps.")

	fs.StringVar(&o.webhookHost, "webhook-host", o.webhookHost, "Address the admission webhook server listens on (empty: all addresses).")
	fs.IntVar(&o.webhookPort, "webhook-port", o.webhookPort, "Port of the admission webhook server (HTTPS). It serves /mutate and /validate.")
	fs.StringVar(&o.certDir, "cert-dir", o.certDir, "Directory holding the webhook serving certificate tls.crt and key tls.key. Self-signed mode writes them there (it must be writable); cert-manager mode expects them mounted there. The files are watched: a renewed certificate is served without a restart.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", o.enableHTTP2, "Offer HTTP/2 on the webhook and metrics servers. Off by default: the apiserver does not need it and HTTP/2 stream resets have been a denial-of-service vector.")
	fs.Int64Var(&o.maxBodyBytes, "max-request-bytes", o.maxBodyBytes, "Largest AdmissionReview accepted; larger requests are answered 413.")
	fs.DurationVar(&o.webhook.ReadTimeout, "webhook-read-timeout", o.webhook.ReadTimeout, "Time a client has to complete the TLS handshake, then to send each request's headers and body; a request still incomplete is answered 408 and its connection closed.")
	fs.IntVar(&o.webhook.MaxConnections, "webhook-max-connections", o.webhook.MaxConnections, "Connections the webhook server keeps open at once; one more is closed as soon as it is accepted, so its client fails at once and the webhook's failurePolicy applies.")
	fs.IntVar(&o.maxInFlight, "webhook-max-in-flight", o.maxInFlight, "Admission requests answered at once, once their bodies are read; more are answered 429 with Retry-After (the apiserver retries within its webhook timeout).")
	fs.Int64Var(&o.maxBuffered, "webhook-max-buffered-bytes", o.maxBuffered, "Request body bytes held at once over all requests (at least --max-request-bytes); a request whose body would exceed it is answered 429 with Retry-After. Bodies are buffered as they arrive, never from the length a client declares.")
	fs.IntVar(&o.webhook.MaxConnectionsPerClient, "webhook-max-connections-per-client", o.webhook.MaxConnectionsPerClient, "Connections the webhook server keeps open at once from one source address (0: a quarter of --webhook-max-connections, at least 16); one more from that address is closed as soon as it is accepted, so one client cannot hold every connection. Raise it to --webhook-max-connections if all apiservers reach shepherd through one address (a NAT or proxy).")
	fs.StringVar(&o.webhook.ClientCAFile, "webhook-client-ca", o.webhook.ClientCAFile, "PEM file of the CA(s) that sign the apiserver's client certificate; set, a request without a client certificate is answered 401 before its body is read (no Event, no audit record) and one of another CA fails the TLS handshake (docs/operations.md, Turning the client CA on, gives the apiserver's side). Read at start.")

	fs.StringVar(&o.metricsAddr, "metrics-bind-address", o.metricsAddr, `Address of the metrics server, which serves /metrics and the audit ring at /audit. "0" disables it.`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", o.metricsSecure, "Serve metrics over HTTPS and require a bearer token that the apiserver authenticates (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL /metrics or /audit). --metrics-secure=false serves plain HTTP with no authentication: for local development only.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", o.metricsCertDir, "Directory with tls.crt/tls.key for the metrics server; empty: a self-signed certificate generated at start.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", o.pprofAddr, "Address serving Go's /debug/pprof profiles, for diagnosing CPU and memory use; empty (the default) serves none. Profiles reveal request data: bind it to localhost.")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", o.healthAddr, "Address serving /healthz and /readyz. /readyz is ready once the webhook server serves its certificate, the caches have synced, WorkloadPolicies are compiled, the frameworks' CRDs have been listed and Workload API discovery has run; a framework whose CRDs are absent does not hold it back.")
	fs.DurationVar(&o.shutdownDrain, "shutdown-drain-period", o.shutdownDrain, "On SIGTERM, how long /readyz fails while the webhook server keeps answering (closing each connection after its response) before it stops accepting: longer than the cluster takes to remove a terminating pod's endpoint everywhere (a few seconds), so no admission routed to it fails. The reconcilers stop, and the Lease is released, at once.")
	fs.DurationVar(&o.shutdownTimeout, "graceful-shutdown-timeout", o.shutdownTimeout, "After the drain period, how long shutdown may take in all: admission requests in flight, the reconciles running, the Events still queued. Keep --shutdown-drain-period plus this below the pod's terminationGracePeriodSeconds.")

	fs.BoolVar(&o.leaderElect, "leader-elect", o.leaderElect, "Run the reconcilers only on the elected leader replica. Admission webhooks run on every replica regardless, leader or not, and whether or not the apiserver is reachable: losing the Lease stops the reconcilers only, and the replica campaigns again; a Lease whose holder stopped renewing it is taken at once.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", o.leaderElectionID, "Name of the Lease used for leader election.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", o.leaderElectionNamespace, "Namespace of the leader-election Lease (empty: the namespace shepherd runs in).")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", o.leaseDuration, "How long a standby waits after the leader's last renewal before it takes the Lease: after a leader dies, enforcement resumes within about this long.")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", o.renewDeadline, "How long the leader keeps retrying to renew its Lease before it stops its reconcilers; shorter than --leader-election-lease-duration.")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", o.retryPeriod, "How often replicas try to acquire or renew the Lease.")

	fs.IntVar(&o.auditRingSize, "audit-ring-size", o.auditRingSize, "Number of recent verdicts kept in memory and served at /audit (oldest dropped first).")
	fs.BoolVar(&o.auditDryRun, "audit-dry-run", o.auditDryRun, "Audit the verdicts of dry-run requests too (marked dryRun; they never produce Events).")
	fs.DurationVar(&o.discoveryInterval, "workload-api-discovery-interval", o.discoveryInterval, "How often discovery re-checks whether the cluster serves the Workload API (rule V-TR-7 and the Workload reconciler).")
	fs.BoolVar(&o.disableReconcile, "disable-reconcilers", o.disableReconcile, "Serve admission only, without the lifecycle reconcilers.")

	webhook.AddDisableRuleFlag(fs, &o.disabledRules, "Built-in rule IDs to switch off (repeatable or comma-separated), e.g. V-JS-5,D-PCS-6; an unknown ID is an error (shepherd export rules lists them). The same flag as check, test, export and audit take.")
	fs.BoolVar(&o.disableStartupPolicyRewrite, "disable-startup-policy-rewrite", o.disableStartupPolicyRewrite, "Switch D-JS-2 off: a JobSet's startupPolicy InOrder is no longer rewritten into dependsOn (V-JS-5 still warns of it).")
	fs.BoolVar(&o.deferToUpstream, "defer-to-upstream", true, "Leave a built-in rule to the layer that already enforces all of it on this cluster: the served CRD (its minimum, enum or CEL rule, which the apiserver checks before any webhook) or a registered upstream validating webhook with failurePolicy Fail (Trainer's validator.trainjob.trainer.kubeflow.org for V-TJ-3). "+
		"Such a rule is inactive, with the reason in /status and shepherd export rules, and re-decided when CRDs or webhook configurations change. Set false to judge every rule anyway.")
	fs.DurationVar(&o.inferenceTerminationDelay, "inference-termination-delay", o.inferenceTerminationDelay, "D-PCS-5: terminationDelay given to Inference PodCliqueSets that set none. 0 leaves it unset (gang termination stays opt-in).")

	// --framework-trainer, --framework-jobset, --framework-grove.
	o.frameworks.addFlags(fs)
	fs.StringToStringVar(&o.features, "feature", o.features, fmt.Sprintf("Who enforces a lifecycle feature an upstream operator may implement too, as feature=auto|on|off (repeatable): %v. "+
		"auto (default): shepherd, unless the cluster shows the upstream operator does it (trainjob-deadline: the TrainJob CRD has spec.activeDeadlineSeconds, which Trainer >= v2.2 enforces; gang-termination, decided per PodCliqueSet: Grove's controller writes the set's MinAvailableBreached); "+
		"on: shepherd always (beside Grove it still leaves to Grove each gang Grove terminates no later); off: never. shepherd's admission rules and audit stay on either way; the decision is logged and exported as shepherd_feature_enforced.", integrations.Features))

	// The certificate flags (--cert-mode, --cert-secret, ...); --cert-dir
	// above is shared and copied into o.certs at start.
	o.certs.AddFlags(fs)
	// --skip-unread-updates.
	o.updateFilter.addFlags(fs)
	// --audit-interval.
	o.backgroundAudit.addFlags(fs)
	// --admission-mode and the audit sink's.
	o.native.addFlags(fs)
	// --zap-log-level and the other logging flags.
	zfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	o.zap.BindFlags(zfs)
	fs.AddGoFlagSet(zfs)
}

// LogTo sends serve's logs to w (stderr, or whoever runs serve in-process).
func (o *Options) LogTo(w io.Writer) { o.zap.DestWriter = w }

func (o *Options) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
	} else if cfg, err = ctrl.GetConfig(); err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.kubeQPS, o.kubeBurst
	return cfg, nil
}

// rulesConfig is the built-in rules' configuration from the flags.
func (o *Options) rulesConfig() celrules.Config {
	c := celrules.Config{
		DisabledRules:               o.disabledRules,
		DisableStartupPolicyRewrite: o.disableStartupPolicyRewrite,
		StandDown:                   o.deferToUpstream,
		OwnWebhooks:                 []string{o.certs.ValidatingWebhookName, o.certs.MutatingWebhookName},
	}
	if o.inferenceTerminationDelay > 0 {
		c.InferenceTerminationDelay = &metav1.Duration{Duration: o.inferenceTerminationDelay}
	}
	return c
}

// Run runs shepherd serve until ctx ends: it waits for the apiserver,
// serves admission on every replica and runs the leader's half in terms of
// leadership, then shuts down as docs/operations.md describes. A bad
// option is an error naming its flag.
func Run(ctx context.Context, o *Options) error {
	log := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(log)
	ctx = ctrl.LoggerInto(ctx, log)

	if o.leaderElect && !(o.retryPeriod > 0 && o.retryPeriod < o.renewDeadline && o.renewDeadline < o.leaseDuration) {
		return fmt.Errorf("leader election needs 0 < --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)", o.retryPeriod, o.renewDeadline, o.leaseDuration)
	}
	if o.maxPolicies < 1 {
		return fmt.Errorf("--max-workload-policies=%d: want at least 1 (default %d)", o.maxPolicies, policies.DefaultMaxPolicies)
	}
	if err := o.backgroundAudit.validate(); err != nil {
		return err
	}
	if err := o.native.validate(); err != nil {
		return err
	}
	if err := webhook.CheckRuleIDs("disable-rule", o.disabledRules); err != nil {
		return err
	}
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	// Nothing below starts without the apiserver: wait for it rather than
	// exit into a crash loop whose back-off outlasts the outage.
	if err := waitForAPIServer(ctx, cfg, o.healthAddr, log); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while waiting
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.metricsSecure,
		CertDir:       o.metricsCertDir,
		TLSOpts:       server.TLSOptions(o.enableHTTP2),
	}
	if o.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	webhooks := server.NewWebhookServer(webhookServing(o, log))
	// The serving manager: admission, caches, Events, probes, for the life
	// of the process, on every replica. The reconcilers run in terms of
	// their own on the leader (package leader), so this manager does no
	// leader election: losing the Lease must not stop admission.
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                  install.NewScheme(),
		Metrics:                 metricsOpts,
		Cache:                   cacheOptions(),
		Client:                  ClientOptions(),
		WebhookServer:           webhooks,
		HealthProbeBindAddress:  o.healthAddr,
		PprofBindAddress:        o.pprofAddr,
		GracefulShutdownTimeout: &o.shutdownTimeout,
		Logger:                  log,
		// Names are unique within one serve by construction; the check
		// is process-wide, and would stop a second serve in the same
		// process (tests restarting serve with other flags).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The Events client's requests are followed, so that shutdown can wait
	// for the Events still queued (requestActivity).
	eventWrites := &requestActivity{}
	eventsCfg := rest.CopyConfig(mgr.GetConfig())
	eventsCfg.Wrap(eventWrites.wrap)
	evMgr, err := events.Manager(&withConfig{Manager: mgr, cfg: eventsCfg}, events.Options{QPS: o.eventQPS, Burst: o.eventBurst})
	if err != nil {
		return err
	}
	mgr = &leader.EventsFrom{Manager: mgr, Events: evMgr}

	// Certificates: the one place serving certificates hook in. In
	// self-signed mode certs.Setup makes sure --cert-dir holds a valid pair
	// before the webhook server starts, then keeps it rotated and the CA
	// bundle injected; in cert-manager mode the files are mounted. Either
	// way certwatcher hot-reloads them. The file writer runs here, on every
	// replica; the authority in the leader's terms.
	o.certs.CertDir = o.certDir
	certsReady, err := certs.Setup(&runnableFilter{Manager: mgr, leader: false}, o.certs, clock.RealClock{})
	if err != nil {
		return fmt.Errorf("setting up serving certificates: %w", err)
	}
	if err := mgr.AddReadyzCheck("certificates", certsReady); err != nil {
		return fmt.Errorf("adding the certificates readiness check: %w", err)
	}

	probe, err := integrations.NewWorkloadAPIProbe(mgr, o.discoveryInterval)
	if err != nil {
		return err
	}
	// Frameworks come and go: each one's lookups and reconcilers start once
	// its CRDs are established (integrations.Watcher).
	features, err := integrations.ParseFeatureSettings(o.features)
	if err != nil {
		return fmt.Errorf("--feature: %w", err)
	}
	enforcement := integrations.NewEnforcement(log.WithName("enforcement"), features)
	rules := o.rulesConfig()
	if rules.Schemas, err = initialSchemas(ctx, mgr.GetAPIReader()); err != nil {
		return err
	}
	live := newLiveSchemas(rules.Schemas)
	terms := leader.NewTerms(mgr, evMgr, o.shutdownTimeout)
	terms.AddLeaderOnly(func(term manager.Manager) error {
		if _, err := certs.Setup(&runnableFilter{Manager: term, leader: true}, o.certs, clock.RealClock{}); err != nil {
			return fmt.Errorf("setting up the certificate authority: %w", err)
		}
		return nil
	})
	reconcileOpts := integrations.ControllerOptions{Clock: clock.RealClock{}, Enforcement: enforcement, Schemas: live, WorkloadAPI: probe.Answer}
	frameworks, err := setupFrameworks(ctx, mgr, o, terms, reconcileOpts)
	if err != nil {
		return err
	}
	chain, err := newChain(mgr, probe, frameworks, rules)
	if err != nil {
		return err
	}
	rec := audit.NewRecorder(o.auditRingSize, mgr.GetEventRecorder("shepherd-webhook"), clock.RealClock{})
	rec.SkipDryRun = !o.auditDryRun
	rec.EventLimit = audit.NewNamespaceLimiter(o.eventNamespaceQPS, o.eventNamespaceBurst, clock.RealClock{})
	if err := registerAdmission(mgr, &o.native, chain, rec, probe, server.Options{MaxBodyBytes: o.maxBodyBytes, MaxInFlight: o.maxInFlight, MaxBufferedBytes: o.maxBuffered}); err != nil {
		return err
	}
	policyReload, err := setupPolicyReload(mgr, chain, o.maxPolicies)
	if err != nil {
		return err
	}
	if err := setupExceptions(mgr, chain); err != nil {
		return err
	}
	// The UPDATE matchCondition of the webhook configurations, kept by the
	// leader (updatefilter.go).
	if err := setupUpdateFilter(o, chain, terms); err != nil {
		return err
	}
	// The background audit of stored objects, on the leader (audit.go).
	if err := setupBackgroundAudit(mgr, o, frameworks, chain, rec, terms); err != nil {
		return err
	}
	if o.deferToUpstream {
		if err := followUpstreamWebhooks(ctx, mgr, chain); err != nil {
			return err
		}
	}
	if err := followSchemas(mgr, frameworks, policyReload, chain, live, enforcement); err != nil {
		return err
	}
	if err := serveStatus(mgr, frameworks, chain, live, enforcement); err != nil {
		return fmt.Errorf("serving %s: %w", StatusPath, err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	draining := &atomic.Bool{}
	if err := mgr.AddReadyzCheck("shutdown", func(*http.Request) error {
		if draining.Load() {
			return errors.New("shutting down: draining admission requests")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding the shutdown readiness check: %w", err)
	}

	lc := &lifecycle{mgr: mgr, webhooks: webhooks, draining: draining, events: eventWrites,
		drain: o.shutdownDrain, timeout: o.shutdownTimeout, log: log}
	if o.leaderElect {
		el, err := leader.NewElector(cfg, mgr, terms, o.election())
		if err != nil {
			return err
		}
		lc.leader = el.Run
	} else {
		lc.leader = func(ctx context.Context) { terms.RunWithoutElection(ctx, o.retryPeriod) }
	}
	log.Info("starting shepherd", "version", o.Version, "webhookPort", o.webhookPort, "certDir", o.certDir,
		"metrics", o.metricsAddr, "metricsSecure", o.metricsSecure, "health", o.healthAddr, "leaderElection", o.leaderElect,
		"shutdownDrainPeriod", o.shutdownDrain)
	return lc.run(ctx)
}

// webhookServing is the webhook server's options from the flags.
func webhookServing(o *Options, log logr.Logger) server.ServingOptions {
	s := o.webhook
	s.Host, s.Port, s.CertDir = o.webhookHost, o.webhookPort, o.certDir
	s.TLSOpts = server.TLSOptions(o.enableHTTP2)
	s.Log = log.WithName("webhook-server")
	return s
}

// ClientOptions are the manager client's options: its reads of objects
// held unstructured — the kinds shepherd reads as served, Trainer's
// runtimes and Grove's objects (api/install) — come from the informer
// cache like typed reads. controller-runtime sends unstructured reads to the
// apiserver unless told otherwise, which would put a GET on the apiserver
// per admission lookup and per reconcile, and make the controllers'
// field-indexed lists fail. The frameworks' controllers watch exactly
// these kinds, so no other informer starts.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{Unstructured: true}}
}

// cacheOptions narrows the manager's caches to what shepherd reads. Only the
// Grove controllers read Pods, and only Pods of a PodClique (Grove labels
// them grove.io/podclique); caching every Pod of a large cluster would cost
// memory for nothing. Likewise only the frameworks' CRDs are kept whole.
func cacheOptions() cache.Options {
	groveReq, err := labels.NewRequirement(api.LabelPodClique, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key; cannot fail
	}
	return cache.Options{DefaultTransform: stripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*groveReq)},
		&apiextensionsv1.CustomResourceDefinition{}: integrations.CacheByObject(),
	}}
}

// stripManagedFields is the cache's transform: objects are held without
// managedFields, often the largest part of an object and, across 10,000
// TrainJobs, megabytes nothing reads. The kinds whose managedFields a
// decision reads keep them (integrations.Framework.KeepManagedFields: the
// Trainer runtimes, Grove's PodCliques and scaling groups). The background
// audit runs informers of its own, which drop them too
// (background.NewObject).
func stripManagedFields() toolscache.TransformFunc {
	return func(in any) (any, error) {
		if integrations.KeepsManagedFields(in) {
			return in, nil
		}
		if o, ok := in.(metav1.Object); ok && o.GetManagedFields() != nil {
			o.SetManagedFields(nil)
		}
		return in, nil
	}
}
