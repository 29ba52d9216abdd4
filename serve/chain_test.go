package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations"
)

// recordingLookups answers every Get with an empty object and records
// what was asked.
type recordingLookups struct {
	asked []schema.GroupVersionKind
}

func (l *recordingLookups) Get(_ context.Context, gvk schema.GroupVersionKind, _, _ string) (client.Object, error) {
	l.asked = append(l.asked, gvk)
	return &corev1.ConfigMap{}, nil
}

func (*recordingLookups) WorkloadAPIServed() bool { return true }

// namespaceLookups is recordingLookups that can also look up Namespaces.
type namespaceLookups struct{ recordingLookups }

func (*namespaceLookups) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}}}, nil
}

// TestFrameworkLookups: a lookup of an inactive framework's kind is
// NotFound without reaching the cache (which would start an informer for
// a kind not served); an active framework's kinds and the built-in kinds
// are looked up.
func TestFrameworkLookups(t *testing.T) {
	ctx := context.Background()
	inner := &recordingLookups{}
	active := map[string]bool{integrations.JobSet: true}
	l := gateLookups(inner, func(f string) bool { return active[f] })

	trainJob := schema.GroupVersionKind{Group: api.TrainerGroup, Version: "v1alpha1", Kind: api.KindTrainJob}
	_, err := l.Get(ctx, trainJob, "ns", "job")
	if !apierrors.IsNotFound(err) {
		t.Errorf("TrainJob with Trainer inactive: %v, want NotFound", err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d == nil || d.Group != api.TrainerGroup || d.Kind != "trainjobs" || d.Name != "job" {
			t.Errorf("NotFound details %+v, want trainjobs.%s job", d, api.TrainerGroup)
		}
	}
	jobSet := schema.GroupVersionKind{Group: api.JobSetGroup, Version: "v1alpha2", Kind: api.KindJobSet}
	if _, err := l.Get(ctx, jobSet, "ns", "js"); err != nil {
		t.Errorf("JobSet with JobSet active: %v", err)
	}
	namespace := corev1.SchemeGroupVersion.WithKind("Namespace")
	if _, err := l.Get(ctx, namespace, "", "ns"); err != nil {
		t.Errorf("a built-in kind: %v", err)
	}
	if diff := cmp.Diff([]schema.GroupVersionKind{jobSet, namespace}, inner.asked); diff != "" {
		t.Errorf("lookups that reached the cache (-want +got):\n%s", diff)
	}

	if _, err := l.Namespace(ctx, "ns"); !apierrors.IsNotFound(err) {
		t.Errorf("Namespace through lookups that cannot: %v, want NotFound", err)
	}
	ns, err := gateLookups(&namespaceLookups{}, func(string) bool { return false }).Namespace(ctx, "ns")
	if err != nil || ns.Labels["team"] != "a" {
		t.Errorf("Namespace = %+v, %v; want the wrapped lookups' Namespace", ns, err)
	}
}

// TestLiveSchemas: the reconcilers' knob forms follow the schemas stored
// last.
func TestLiveSchemas(t *testing.T) {
	pinned, err := celrules.LoadPinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	gk := schema.GroupKind{Group: api.TrainerGroup, Kind: api.KindTrainJob}
	live := newLiveSchemas(pinned)
	if !live.HasField(gk, []string{"spec", "trainer"}) {
		t.Fatal("the pinned TrainJob schema has no spec.trainer")
	}
	if live.HasField(gk, []string{"spec", "noSuchField"}) {
		t.Error("a field no schema has was found")
	}
	none, err := celrules.NewSchemas(nil, "no CRDs")
	if err != nil {
		t.Fatal(err)
	}
	live.store(none)
	if live.HasField(gk, []string{"spec", "trainer"}) {
		t.Error("spec.trainer found after the TrainJob CRD was removed")
	}
}

// fakeChain is an admissionChain that follows upstream webhooks: it
// records what it was given and reports the inactive rules it is told.
type fakeChain struct {
	admissionChain
	mu       sync.Mutex
	given    [][]string // the configurations' names, per call
	inactive map[string]string
	err      error
}

func (c *fakeChain) SetUpstreamWebhooks(hooks []admissionregistrationv1.ValidatingWebhookConfiguration) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, h := range hooks {
		names = append(names, h.Name)
	}
	c.given = append(c.given, names)
	if c.err != nil {
		return false, c.err
	}
	c.inactive = map[string]string{"V-TJ-3": "enforced by " + names[0]}
	return true, nil
}

func (c *fakeChain) InactiveRules() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inactive
}

func (c *fakeChain) calls() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string(nil), c.given...)
}

// listingCache is a fake cache whose lists of validating webhook
// configurations return items.
type listingCache struct {
	informertest.FakeInformers
	items []admissionregistrationv1.ValidatingWebhookConfiguration
}

func (c *listingCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if l, ok := list.(*admissionregistrationv1.ValidatingWebhookConfigurationList); ok {
		l.Items = c.items
	}
	return nil
}

// TestFollowUpstreamWebhooks: every change to the cluster's validating
// webhook configurations gives the chain the whole list again; /readyz
// waits for the first list; a chain that cannot follow them is an error.
func TestFollowUpstreamWebhooks(t *testing.T) {
	ctx := context.Background()
	vwc := admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration")
	inf := controllertest.NewFakeInformer() // not synced yet
	c := &listingCache{items: []admissionregistrationv1.ValidatingWebhookConfiguration{
		{ObjectMeta: metav1.ObjectMeta{Name: "validator.trainjob.trainer.kubeflow.org"}}, {ObjectMeta: metav1.ObjectMeta{Name: "shepherd"}},
	}}
	c.InformersByGVK = map[schema.GroupVersionKind]toolscache.SharedIndexInformer{vwc: inf}
	mgr := &fakeManager{cache: c}
	chain := &fakeChain{}
	if err := followUpstreamWebhooks(ctx, mgr, chain); err != nil {
		t.Fatal(err)
	}
	ready := mgr.readyz["upstream-webhooks"]
	if ready == nil {
		t.Fatal("no upstream-webhooks readiness check")
	}
	if err := ready(nil); err == nil {
		t.Error("ready before the configurations were listed")
	}
	inf.Synced()
	if err := ready(nil); err != nil {
		t.Errorf("ready after the list: %v", err)
	}

	obj := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "validator.trainjob.trainer.kubeflow.org"}}
	inf.Add(obj)
	inf.Update(obj, obj)
	inf.Delete(obj)
	want := [][]string{{"validator.trainjob.trainer.kubeflow.org", "shepherd"}, {"validator.trainjob.trainer.kubeflow.org", "shepherd"}, {"validator.trainjob.trainer.kubeflow.org", "shepherd"}}
	if diff := cmp.Diff(want, chain.calls()); diff != "" {
		t.Errorf("lists given to the chain (-want +got):\n%s", diff)
	}

	// The chain's refusal leaves the rules as they are; serve goes on.
	chain.err = errors.New("cannot judge")
	inf.Add(obj)
	if got := chain.InactiveRules()["V-TJ-3"]; got == "" {
		t.Error("a refused list changed the rules in force")
	}

	if err := followUpstreamWebhooks(ctx, mgr, struct{ admissionChain }{}); err == nil {
		t.Error("a chain that cannot follow upstream webhooks was accepted")
	}
}

// TestServeStatus: /status says which frameworks are active, who
// enforces each feature, which rules are inactive and why, and which
// schemas the rules are checked against.
func TestServeStatus(t *testing.T) {
	mgr := &fakeManager{cache: &informertest.FakeInformers{Scheme: install.NewScheme()}}
	w, err := integrations.NewWatcher(mgr, DefaultOptions().frameworks.modes())
	if err != nil {
		t.Fatal(err)
	}
	features, err := integrations.ParseFeatureSettings(map[string]string{"trainjob-deadline": "off"})
	if err != nil {
		t.Fatal(err)
	}
	enf := integrations.NewEnforcement(logr.Discard(), features)
	chain := &fakeChain{inactive: map[string]string{"V-TJ-3": "enforced by Trainer's webhook"}}
	s, err := celrules.NewSchemas(nil, "served CRDs")
	if err != nil {
		t.Fatal(err)
	}
	if err := serveStatus(mgr, w, chain, newLiveSchemas(s), enf); err != nil {
		t.Fatal(err)
	}
	h := mgr.extra[StatusPath]
	if h == nil {
		t.Fatalf("nothing served at %s", StatusPath)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, StatusPath, nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "application/json" {
		t.Fatalf("%s answered %d %q", StatusPath, rec.Code, ct)
	}
	var got Status
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := Status{
		Frameworks:    map[string]bool{"trainer": false, "jobset": false, "grove": false},
		Features:      enf.Status(),
		InactiveRules: map[string]string{"V-TJ-3": "enforced by Trainer's webhook"},
		Schemas:       "served CRDs",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", StatusPath, diff)
	}
	if got.Features["trainjob-deadline"] == "" {
		t.Errorf("features %v do not say who enforces trainjob-deadline", got.Features)
	}
}
