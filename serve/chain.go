package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
	"github.com/shepherd-k8s/shepherd/webhook/policies"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// admissionChain is what serve needs of the chain: admission, and a policy
// store for the WorkloadPolicy hot reload.
type admissionChain interface {
	webhook.Admitter
	server.PolicyChecker
	policies.Sink
	policies.SchemaSink
	exceptions.Sink
}

// newChain builds the admission chain over the manager's cached lookups
// (a miss asks the apiserver), of the active frameworks only.
func newChain(mgr ctrl.Manager, probe *integrations.WorkloadAPIProbe, frameworks *integrations.Watcher, rules celrules.Config) (admissionChain, error) {
	chain, err := webhook.NewChain(webhook.ChainOptions{
		Lookups: gateLookups(webhook.NewClientLookups(mgr.GetClient(), mgr.GetAPIReader(), probe.Served), frameworks.Active),
		Rules:   rules,
	})
	if err != nil {
		return nil, fmt.Errorf("building the admission chain: %w", err)
	}
	return chain, nil
}

// setupPolicyReload starts the WorkloadPolicy hot reload into chain and
// makes /readyz wait for every policy to be compiled.
func setupPolicyReload(mgr ctrl.Manager, chain admissionChain, maxPolicies int) (*policies.Reconciler, error) {
	r, err := policies.Setup(mgr, chain, clock.RealClock{}, maxPolicies)
	if err != nil {
		return nil, err
	}
	return r, mgr.AddReadyzCheck("policies", r.ReadyChecker)
}

// setupExceptions keeps the chain's PolicyExceptions those the cluster
// stores.
func setupExceptions(mgr ctrl.Manager, chain admissionChain) error {
	builtin, err := webhook.BuiltinRuleIDs()
	if err != nil {
		return err
	}
	_, err = exceptions.Setup(mgr, chain, clock.RealClock{}, builtin)
	return err
}

// followSchemas keeps every rule type-checked against the CRDs the cluster
// serves: at start and whenever a framework's CRD is installed, upgraded or
// removed (the watcher's subscription), the chain is type-checked again,
// live (what the reconcilers ask which form a knob takes) follows, and the
// "who enforces the deadline" decision is taken again from the TrainJob
// schema. /readyz waits for the first pass.
func followSchemas(mgr ctrl.Manager, w *integrations.Watcher, r *policies.Reconciler, chain admissionChain, live *liveSchemas, enf *integrations.Enforcement) error {
	w.Subscribe(func(ctx context.Context, crds []*apiextensionsv1.CustomResourceDefinition) {
		log := ctrl.LoggerFrom(ctx).WithName("schemas")
		s, err := r.ApplySchemas(ctx, chain, crds)
		if err != nil {
			// The previous schemas stay in force; the next CRD change
			// tries again.
			log.Error(err, "type-checking the rules against the cluster's CRDs")
			return
		}
		live.store(s)
		enf.SetUpstreamFrom(live)
	})
	return mgr.AddReadyzCheck("schemas", r.SchemasReadyChecker)
}

// initialSchemas are the schemas the rules are first compiled against: the
// ones of the CRDs the cluster serves now, read once (followSchemas'
// first pass finds the same CRDs and keeps them, SchemaSink.Schemas).
// When the CRDs cannot be listed, the pinned upstream schemas stand in
// until followSchemas has read them — parsed for this serve alone (not
// celrules.PinnedSchemas, kept for the process), so they and the
// built-ins compiled against them are freed once replaced. Either way
// only one set of schemas is compiled at start: at scale it is the peak
// of serve's memory.
func initialSchemas(ctx context.Context, r client.Reader) (*celrules.Schemas, error) {
	crds, err := frameworkCRDs(ctx, r)
	if err == nil {
		return celrules.NewSchemas(crds, policies.ServedSchemasSource)
	}
	ctrl.LoggerFrom(ctx).Info("cannot list the cluster's CRDs yet; the rules start on the pinned upstream schemas", "reason", err.Error())
	return celrules.LoadPinnedSchemas()
}

// crdPage is how many CRDs one list request returns: a cluster may serve
// hundreds, megabytes of schemas each page, of which shepherd keeps a few.
const crdPage = 50

// frameworkCRDs lists the cluster's CRDs a page at a time and keeps the
// frameworks' (integrations.FrameworkCRDs), copied out of their page so
// that the rest of it can be freed.
func frameworkCRDs(ctx context.Context, r client.Reader) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	cont := ""
	for {
		var page apiextensionsv1.CustomResourceDefinitionList
		if err := r.List(ctx, &page, client.Limit(crdPage), client.Continue(cont)); err != nil {
			return nil, err
		}
		for _, c := range integrations.FrameworkCRDs(page.Items) {
			crds = append(crds, c.DeepCopy())
		}
		if cont = page.Continue; cont == "" {
			break
		}
	}
	slices.SortFunc(crds, func(a, b *apiextensionsv1.CustomResourceDefinition) int { return strings.Compare(a.Name, b.Name) })
	return crds, nil
}

// liveSchemas are the schemas the cluster serves now, for the reconcilers'
// knob forms (knob.FieldSchemas); the pinned upstream ones until the first
// pass of followSchemas.
type liveSchemas struct {
	p atomic.Pointer[celrules.Schemas]
}

func newLiveSchemas(s *celrules.Schemas) *liveSchemas {
	l := &liveSchemas{}
	l.p.Store(s)
	return l
}

func (l *liveSchemas) store(s *celrules.Schemas) { l.p.Store(s) }

// HasField implements knob.FieldSchemas.
func (l *liveSchemas) HasField(gk schema.GroupKind, path []string) bool {
	return l.p.Load().HasField(gk, path)
}

// StatusPath serves, on the metrics server (authenticated like /metrics),
// what this replica is doing beside the upstream operators: which
// frameworks are active, who enforces each lifecycle feature, which
// built-in rules are inactive and what schemas the rules are checked
// against.
const StatusPath = "/status"

// Status is the JSON of StatusPath.
type Status struct {
	Frameworks    map[string]bool                 `json:"frameworks"`
	Features      map[integrations.Feature]string `json:"features"`
	InactiveRules map[string]string               `json:"inactiveRules"`
	Schemas       string                          `json:"schemas"`
}

func serveStatus(mgr ctrl.Manager, w *integrations.Watcher, chain admissionChain, live *liveSchemas, enf *integrations.Enforcement) error {
	return mgr.AddMetricsServerExtraHandler(StatusPath, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		st := Status{Frameworks: map[string]bool{}, Features: enf.Status(), InactiveRules: chain.InactiveRules(), Schemas: live.p.Load().Source}
		for _, f := range integrations.Frameworks {
			st.Frameworks[f.Name] = w.Active(f.Name)
		}
		rw.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(rw).Encode(st); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
		}
	}))
}

// upstreamSink is what follows the cluster's validating webhook
// configurations: the admission chain (webhook.Chain.SetUpstreamWebhooks).
type upstreamSink interface {
	SetUpstreamWebhooks(hooks []admissionregistrationv1.ValidatingWebhookConfiguration) (bool, error)
	InactiveRules() map[string]string
}

// Permissions followUpstreamWebhooks needs (for RBAC generation; test/rbac
// checks the shipped RBAC grants them): reading every validating webhook
// configuration, never writing another's.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=list;watch

// followUpstreamWebhooks keeps the chain's view of the cluster's validating
// webhook configurations, on every replica (each one admits): a built-in
// rule or Go check whose upstream webhook is registered stands down, and
// stands up again when it goes (--defer-to-upstream). /readyz waits for
// the first list.
func followUpstreamWebhooks(ctx context.Context, mgr ctrl.Manager, chain admissionChain) error {
	sink, ok := chain.(upstreamSink)
	if !ok {
		return fmt.Errorf("the admission chain %T cannot follow upstream webhooks", chain)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching validating webhook configurations: %w", err)
	}
	log := ctrl.LoggerFrom(ctx).WithName("upstream-webhooks")
	var mu sync.Mutex
	sync := func() {
		mu.Lock()
		defer mu.Unlock()
		var list admissionregistrationv1.ValidatingWebhookConfigurationList
		if err := mgr.GetCache().List(ctx, &list); err != nil {
			log.Error(err, "listing validating webhook configurations; the rules in force stay as they are")
			return
		}
		before := sink.InactiveRules()
		changed, err := sink.SetUpstreamWebhooks(list.Items)
		if err != nil {
			log.Error(err, "judging the rules against the upstream webhooks; the rules in force stay as they are")
			return
		}
		if changed {
			policies.ReportInactive(ctrl.LoggerInto(ctx, log), before, sink.InactiveRules(), false)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sync() },
		UpdateFunc: func(any, any) { sync() },
		DeleteFunc: func(any) { sync() },
	}); err != nil {
		return fmt.Errorf("watching validating webhook configurations: %w", err)
	}
	return mgr.AddReadyzCheck("upstream-webhooks", func(*http.Request) error {
		if !inf.HasSynced() {
			return fmt.Errorf("validating webhook configurations not listed yet")
		}
		return nil
	})
}
