package vap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// The defaulting half of the native-admission parity: every defaulting case
// of the corpus (the cases of a D-rule, and every case whose defaulting
// patch is not empty) and every PodCliqueSet and JobSet of examples/valid
// is admitted by the apiserver with the MutatingAdmissionPolicies `shepherd
// export map` writes, and the object the apiserver returns from a dry run
// must equal the object `shepherd check`'s chain defaults
// (webhook.Chain.Default on the object as the apiserver decodes it:
// pruned and defaulted by its CRD), but for the metadata the server sets.
// Both on the seed-shaped CRDs of the suite's control plane, the knobs in
// their seed fields, and on the pinned upstream CRDs, the knobs in their
// carrier annotations.
//
// D-WL-1's cases are not replayed: it needs lookups and is not exported
// (the webhook keeps it). Each configuration of the cases (D-PCS-5's delay,
// D-JS-2's rewrite switched off) gets its own set of policies, renamed, its
// bindings narrowed to namespaces labelled labelMAPSet with its name: no
// other test's requests meet them. The other tests fence their policies
// and webhooks into namespaces labelled otherwise, and a request these
// cases send that any admission policy or webhook rejects fails.

const labelMAPSet = "parity.shepherd.dev/map-set"

// TestExportedMAPsDefaultAsCheck runs the parity on the suite's control
// plane, whose CRDs are the seed-shaped ones.
func TestExportedMAPsDefaultAsCheck(t *testing.T) {
	s, err := seedcrds.Schemas()
	if err != nil {
		t.Fatal(err)
	}
	mapParity(t, env, s, corpus.SeedForm)
}

// TestExportedMAPsDefaultAsCheckOnUpstreamCRDs runs it on the pinned
// upstream CRDs. They cannot live beside the seed-shaped ones (same groups
// and kinds), so this test starts a control plane of its own, a bare one
// (no webhooks, no shepherd), and stops it when it ends: a few seconds.
func TestExportedMAPsDefaultAsCheckOnUpstreamCRDs(t *testing.T) {
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	upstream := cluster.Start(t, cluster.Options{CRDs: cluster.UpstreamCRDs})
	mapParity(t, upstream, s, corpus.CarrierForm)
}

// mapCase is one request of the parity.
type mapCase struct {
	name     string
	config   celrules.Config
	op       string
	object   *unstructured.Unstructured
	old      *unstructured.Unstructured
	defaults bool // the chain's patch must not be empty
}

func mapParity(t *testing.T, c *cluster.Cluster, s *celrules.Schemas, form corpus.Form) {
	ctx := context.Background()
	cases := mapCases(t, s, form)

	// One set of policies per configuration.
	sets := map[string][]*mapCase{}
	configs := map[string]celrules.Config{}
	for _, mc := range cases {
		key, err := json.Marshal(mc.config)
		if err != nil {
			t.Fatal(err)
		}
		sets[string(key)] = append(sets[string(key)], mc)
		configs[string(key)] = mc.config
	}
	keys := make([]string, 0, len(sets))
	for k := range sets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	run := rand.String(5)
	namespaces := map[string]string{}
	exported := 0
	for i, key := range keys {
		set := fmt.Sprintf("%s-%d", run, i)
		cfg := configs[key]
		cfg.Schemas = s
		policies, bindings, notExported, err := celrules.ExportDefaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range notExported {
			if strings.HasPrefix(n.Reason, "inactive") {
				t.Errorf("configuration %s: %s does not type-check: %s", key, n.ID, n.Reason)
			}
		}
		createMAPs(t, c, set, policies, bindings)
		if i == 0 {
			t.Run("type-check clean against the published schemas", func(t *testing.T) { typeCheckMAPs(t, c, policies) })
		}
		exported += len(policies)
		namespaces[key] = mapNamespace(t, c, set)
	}
	if exported == 0 {
		t.Fatal("no policy exported")
	}
	waitMAPsActive(t, c)
	unbound := mapNamespace(t, c, "none")

	// The cases are independent (an object of its own each): they run side
	// by side, and the group returns once all have.
	var changed atomic.Int32
	t.Run("cases", func(t *testing.T) {
		for _, key := range keys {
			for _, mc := range sets[key] {
				t.Run(mc.name, func(t *testing.T) {
					t.Parallel()
					if mapParityCase(ctx, t, c, s, form, namespaces[key], unbound, mc) {
						changed.Add(1)
					}
				})
			}
		}
	})
	// Not vacuous: most cases are defaulted, and each D-rule exported here
	// changes at least one object (the corpus covers them all).
	if len(cases) < 15 || changed.Load() < 10 {
		t.Errorf("%d requests, %d of them defaulted: the corpus lost its defaulting cases", len(cases), changed.Load())
	}
	t.Logf("%d requests (%d defaulted) through %d policies in %d configurations, by %s", len(cases), changed.Load(), exported, len(keys), form)
}

// nonDNS is what a case's name may hold that an object's name may not.
var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// mapParityCase sends one request and compares; it reports whether the
// object was defaulted.
func mapParityCase(ctx context.Context, t *testing.T, c *cluster.Cluster, s *celrules.Schemas, form corpus.Form, ns, unbound string, mc *mapCase) bool {
	name := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(mc.name), "-"), "-")
	obj := mc.object.DeepCopy()
	obj.SetName(name)
	obj.SetNamespace(ns)
	var stored *unstructured.Unstructured
	if mc.old != nil {
		// The stored object, created through the policies as a client
		// would have created it.
		stored = mc.old.DeepCopy()
		stored.SetName(name)
		stored.SetNamespace(ns)
		if err := c.Client.Create(ctx, stored); err != nil {
			t.Fatalf("creating the stored object: %v", err)
		}
		obj.SetResourceVersion(stored.GetResourceVersion())
	}

	// shepherd check: the object as the apiserver decodes it (fields its
	// schema lacks dropped, its defaults applied), then shepherd's defaults,
	// the same policies applied in-process.
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: withSchemas(mc.config, s), CheckSchemas: true})
	if err != nil {
		t.Fatal(err)
	}
	in := obj.DeepCopy()
	s.Prune(in.GroupVersionKind(), in.Object)
	s.DropNulls(in.GroupVersionKind(), in.Object)
	v := chain.Default(ctx, request(t, mc.op, in, stored))
	if !v.Allowed || v.Object == nil {
		t.Fatalf("the chain's defaulting denied: %+v", v.Violations)
	}
	if mc.defaults && len(v.Patch) == 0 {
		// The corpus's expectations are the seed form's; the upstream
		// CRDs' own defaults may leave shepherd nothing to default (Grove's
		// defaults a scaling group's minAvailable to 1).
		if form == corpus.SeedForm {
			t.Fatalf("the corpus expects defaults, the chain made none")
		}
		t.Logf("the corpus expects defaults (seed form); here the CRD's own defaults, applied when the apiserver decodes the object, left none to make")
	}

	var got *unstructured.Unstructured
	// On a control plane started for this test the admission plugins'
	// REST mapper may not know the CRDs yet ("There can be a delay between
	// when CustomResourceDefinitions are created and when they are
	// available"): retry that one error, never another.
	_ = testkit.Poll(250*time.Millisecond, 60*time.Second, func(context.Context) (bool, error) {
		got = obj.DeepCopy()
		if mc.old != nil {
			err = c.Client.Update(ctx, got, client.DryRunAll)
		} else {
			err = c.Client.Create(ctx, got, client.DryRunAll)
		}
		return err == nil || !strings.Contains(err.Error(), "There can be a delay between when CustomResourceDefinitions are created"), nil
	})
	if err != nil {
		// Accepted only where the CRD itself rejects the object, policies
		// or not (the upstream Grove CRD's list-map keys refuse duplicate
		// clique names, which the seed-shaped one leaves to V-PCS-4): sent
		// into a namespace no policy binds, it must fail alike.
		bare := obj.DeepCopy()
		bare.SetNamespace(unbound)
		bareErr := errors.New("not tried: an UPDATE")
		if mc.old == nil {
			bareErr = c.Client.Create(ctx, bare, client.DryRunAll)
		}
		byAdmission := strings.Contains(err.Error(), "AdmissionPolicy") || strings.Contains(err.Error(), "admission webhook")
		if byAdmission || bareErr == nil || strings.ReplaceAll(bareErr.Error(), unbound, ns) != err.Error() {
			t.Fatalf("the apiserver with the exported policies rejected it: %v (without them: %v)", err, bareErr)
		}
		t.Logf("the CRD's own validation rejects this object, with or without the policies: nothing to compare: %v", err)
		return false
	}
	if diff := cmp.Diff(comparable(t, v.Object), comparable(t, got.Object)); diff != "" {
		t.Errorf("the apiserver's object (exported MutatingAdmissionPolicies) differs from shepherd check's (-check +apiserver):\n%s", diff)
	}
	return len(v.Patch) > 0
}

func withSchemas(cfg celrules.Config, s *celrules.Schemas) celrules.Config {
	cfg.Schemas = s
	return cfg
}

// comparable is obj as JSON values (numbers as float64 on both sides)
// without what the server sets on every object: uid, creationTimestamp,
// resourceVersion, managedFields, generation.
func comparable(t *testing.T, obj map[string]any) any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if md, ok := out["metadata"].(map[string]any); ok {
		for _, k := range []string{"uid", "creationTimestamp", "resourceVersion", "managedFields", "generation"} {
			delete(md, k)
		}
	}
	return out
}

// mapCases are the corpus's defaulting cases of the exportable rules and
// the examples of the kinds they default, in form; cases with a field the
// schemas s would drop (the seed-only ones, in the carrier form) are left
// out, as the apiserver would reject them under Strict.
func mapCases(t *testing.T, s *celrules.Schemas, form corpus.Form) []*mapCase {
	all, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	exportable := map[string]bool{}
	for _, id := range celrules.DefaultRuleIDs() {
		exportable[id] = true
	}
	var out []*mapCase
	for i := range all {
		cs := &all[i]
		kind := cs.Object.GetKind()
		if kind != api.KindPodCliqueSet && kind != api.KindJobSet {
			continue
		}
		if !exportable[cs.Rule] && len(cs.WantPatchPaths) == 0 {
			continue // not a defaulting case
		}
		if strings.HasPrefix(cs.Rule, "D-") && !exportable[cs.Rule] {
			t.Logf("%s: %s needs lookups and is not exported", cs.Name, cs.Rule)
			continue
		}
		mc := &mapCase{name: cs.Name, config: cs.Config, op: cs.OperationOrDefault(), object: cs.Object, old: cs.OldObject, defaults: len(cs.WantPatchPaths) > 0}
		if form == corpus.CarrierForm {
			mc.object, mc.old = upstreamShaped(mc.object), upstreamShaped(mc.old)
			if dropped := droppedFields(s, mc.object, mc.old); len(dropped) > 0 {
				t.Logf("%s: fields the upstream CRDs lack and no carrier carries (%v): seed form only", cs.Name, dropped)
				continue
			}
		}
		out = append(out, mc)
	}
	for _, ex := range examples(t) {
		mc := &mapCase{name: "example-" + ex.GetName(), op: "CREATE", object: ex}
		if form == corpus.SeedForm {
			if dropped := droppedFields(s, ex); len(dropped) > 0 {
				// Sent anyway: dropped by both (the apiserver under Warn,
				// which is a client's default, and the chain's pruning).
				t.Logf("%s: fields the seed-shaped CRDs lack, dropped on both sides: %v", mc.name, dropped)
			}
		}
		out = append(out, mc)
	}
	return out
}

// upstreamShaped is a case's object for the upstream CRDs: knobs in their
// carriers, and Grove's roleName (required there, not by the seed-shaped
// CRDs, read by no rule) set to the clique's name, as Grove's operator names
// roles.
func upstreamShaped(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u == nil {
		return nil
	}
	u = corpus.ToCarriers(u)
	if u.GetKind() != api.KindPodCliqueSet {
		return u
	}
	cliques, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "cliques")
	for _, c := range cliques {
		cm, _ := c.(map[string]any)
		spec, ok := cm["spec"].(map[string]any)
		if _, set := spec["roleName"]; ok && !set {
			spec["roleName"] = cm["name"]
		}
	}
	if cliques != nil {
		_ = unstructured.SetNestedSlice(u.Object, cliques, "spec", "template", "cliques")
	}
	return u
}

// droppedFields are the fields of objs the schemas s do not have.
func droppedFields(s *celrules.Schemas, objs ...*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o == nil {
			continue
		}
		out = append(out, s.Prune(o.GroupVersionKind(), o.DeepCopy().Object)...)
	}
	return out
}

// examples are the PodCliqueSets and JobSets of examples/valid.
func examples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "examples", "valid", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if k := u.GetKind(); k == api.KindPodCliqueSet || k == api.KindJobSet {
				out = append(out, u)
			}
		}
	}
	if len(out) < 4 {
		t.Fatalf("%d PodCliqueSets and JobSets in examples/valid: the examples moved", len(out))
	}
	return out
}

// createMAPs creates an exported set of policies and bindings under names
// of their own (suffix set), the bindings narrowed to namespaces labelled
// labelMAPSet=set on top of the export's own scope.
func createMAPs(t *testing.T, c *cluster.Cluster, set string, policies []*admissionregistrationv1.MutatingAdmissionPolicy, bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := context.Background()
	for i := range policies {
		p, b := policies[i].DeepCopy(), bindings[i].DeepCopy()
		p.Name += "-" + set
		b.Name += "-" + set
		b.Spec.PolicyName = p.Name
		sel := b.Spec.MatchResources.NamespaceSelector
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: labelMAPSet, Operator: metav1.LabelSelectorOpIn, Values: []string{set}})
		if err := c.Client.Create(ctx, p); err != nil {
			t.Fatalf("the apiserver rejected exported policy %s: %v", policies[i].Name, err)
		}
		if err := c.Client.Create(ctx, b); err != nil {
			t.Fatalf("the apiserver rejected exported binding %s: %v", bindings[i].Name, err)
		}
		t.Cleanup(func() {
			_ = c.Client.Delete(context.Background(), b)
			_ = c.Client.Delete(context.Background(), p)
		})
	}
}

func mapNamespace(t *testing.T, c *cluster.Cluster, set string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "map-", Labels: map[string]string{labelMAPSet: set}}}
	if err := c.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// waitMAPsActive returns once every MutatingAdmissionPolicy and binding
// created before the call is applied. As for ValidatingAdmissionPolicies
// (waitVAPsActive), a canary created last tells: a policy labelling
// ConfigMaps of a namespace of its own. The plugin's informers see objects
// in resourceVersion order, so once the canary mutates, everything created
// before it is loaded too.
func waitMAPsActive(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	id := "map-canary-" + rand.String(6)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "canary-", Labels: map[string]string{labelCanary: id}}}
	if err := c.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	p := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: fmt.Sprintf("[JSONPatch{op: 'add', path: '/metadata/labels', value: {'%s': '%s'}}]", labelCanary, id)},
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: id,
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelCanary: id}},
			},
		},
	}
	for _, o := range []client.Object{p, b} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating the canary: %v", err)
		}
	}
	defer func() {
		_ = c.Client.Delete(ctx, b)
		_ = c.Client.Delete(ctx, p)
	}()
	testkit.Eventually(t, timeout, "the canary MutatingAdmissionPolicy applied", func() (bool, string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns.Name}}
		if err := c.Client.Create(ctx, cm, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return cm.Labels[labelCanary] == id, fmt.Sprintf("labels %v", cm.Labels)
	})
}

// typeCheckMAPs type-checks the policies against the schemas the apiserver
// publishes for the kinds they match (its OpenAPI, through discovery, as
// cluster.TypeCheckVAPs does for ValidatingAdmissionPolicies): the
// apiserver has no type checker of its own for mutating policies, and
// export type-checked them against CRD files, not against what this
// apiserver serves.
func typeCheckMAPs(t *testing.T, c *cluster.Cluster, policies []*admissionregistrationv1.MutatingAdmissionPolicy) {
	t.Helper()
	type checker struct {
		resolver *resolver.ClientDiscoveryResolver
		mapper   meta.RESTMapper
	}
	newChecker := func() checker {
		dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		return checker{&resolver.ClientDiscoveryResolver{Discovery: dc}, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
	}
	gvks := func(ck checker, p *admissionregistrationv1.MutatingAdmissionPolicy) []schema.GroupVersionKind {
		var out []schema.GroupVersionKind
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						gvk, err := ck.mapper.KindFor(schema.GroupVersionResource{Group: g, Version: v, Resource: res})
						if err != nil {
							t.Fatalf("%s: %v", p.Name, err)
						}
						out = append(out, gvk)
					}
				}
			}
		}
		return out
	}
	ck := newChecker()
	for _, p := range policies {
		// A misspelled field must be caught: proof that the schema was
		// resolved. The apiserver publishes a CRD's schema a little after
		// establishing it, so the checker (rebuilt, as discovery caches)
		// is given a while to find it.
		probe := p.DeepCopy()
		probe.Spec.MatchConditions = append(probe.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "probe", Expression: "has(object.spec.noSuchFieldAnywhere)"})
		found := func() bool {
			errs := celrules.TypeCheckMutatingPolicy(probe, ck.resolver, gvks(ck, probe))
			return len(errs) > 0 && strings.Contains(errs.ToAggregate().Error(), "undefined field 'noSuchFieldAnywhere'")
		}
		if err := testkit.Poll(250*time.Millisecond, 30*time.Second, func() bool {
			if found() {
				return true
			}
			ck = newChecker()
			return false
		}); err != nil {
			t.Errorf("%s: the type checker found no schema to check against: %v", p.Name, err)
			continue
		}
		if errs := celrules.TypeCheckMutatingPolicy(p, ck.resolver, gvks(ck, p)); len(errs) > 0 {
			t.Errorf("%s: type-check errors against the published schemas: %v", p.Name, errs)
		}
	}
}
