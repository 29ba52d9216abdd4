package grove

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/api/install"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	"github.com/shepherd-k8s/shepherd/integrations/grove/training"
	"github.com/shepherd-k8s/shepherd/serve"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// pollTimeout is generous: the machine is shared by several engineers.
const pollTimeout = 60 * time.Second

// groveManager is the field manager of the test when it plays Grove's
// operator writing MinAvailableBreached.
const groveManager = "grove-operator"

// shepherd is one running instance of shepherd's Grove controllers, watching
// one namespace.
type shepherd struct {
	stop func()
	// enf is the instance's "who enforces" decision.
	enf *integrations.Enforcement
}

// startShepherd runs the gang and training controllers against w's
// namespace, with gang termination on setting auto, until the test ends or
// stop is called.
func (w *world) startShepherd() *shepherd { return w.startShepherdWith(integrations.ModeAuto) }

// startShepherdWith is startShepherd with the gang-termination setting mode.
func (w *world) startShepherdWith(mode integrations.Mode) *shepherd {
	t := w.t
	t.Helper()
	opts := ctrl.Options{
		Scheme:                 install.NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{w.ns: {}}},
		Client:                 serve.ClientOptions(),
		// Every test runs its own instance; names repeat across them.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	mgr, err := ctrl.NewManager(w.p.cl.Config, opts)
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	// Events on their own rate-limited client, as `shepherd serve` sends them.
	if mgr, err = events.Manager(mgr, events.Options{}); err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	enf := integrations.NewEnforcement(mgr.GetLogger(), map[integrations.Feature]integrations.Mode{integrations.FeatureGangTermination: mode})
	if err := gang.Setup(mgr, clock.RealClock{}, enf); err != nil {
		t.Fatal(err)
	}
	if err := training.Setup(mgr, clock.RealClock{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	s := &shepherd{enf: enf}
	stopped := false
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(s.stop)
	return s
}

// world is one scenario's namespace and the Grove objects the test made.
type world struct {
	// timeout bounds every wait; pollTimeout unless a test needs longer.
	timeout time.Duration
	t       testing.TB
	ctx     context.Context
	ns      string
	c       client.Client
	p       *platform
}

// newWorld is a namespace on the upstream control plane (Grove's schema).
func newWorld(t testing.TB) *world { return newWorldOn(t, upstream) }

func newWorldOn(t testing.TB, p *platform) *world {
	t.Helper()
	return &world{timeout: pollTimeout, t: t, ctx: context.Background(), ns: p.cl.Namespace(t), c: p.cl.Client, p: p}
}

// cliqueSpec describes one clique of a PodCliqueSet template.
type cliqueSpec struct {
	name         string
	replicas     int32
	minAvailable int32
}

// groupSpec describes one PodCliqueScalingGroup config.
type groupSpec struct {
	name         string
	cliques      []string
	replicas     int32
	minAvailable int32
	delay        *time.Duration
}

// setSpec describes a PodCliqueSet.
type setSpec struct {
	name        string
	replicas    int32
	training    bool
	maxRestarts *int32
	maxRuntime  *time.Duration
	delay       *time.Duration
	cliques     []cliqueSpec
	groups      []groupSpec
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "registry.example/trainer:1"}}}
}

func dur(d *time.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	return &metav1.Duration{Duration: *d}
}

func ownerRef(o metav1.Object, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: grovev1alpha1.GroupVersion.String(), Kind: kind, Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// createSet creates the PodCliqueSet and, playing Grove, every replica's
// PCSGs, PodCliques and pods (not yet ready). The knobs go where the
// platform's schema keeps them: the seed fields, or their carriers.
func (w *world) createSet(s setSpec) *grovev1alpha1.PodCliqueSet {
	w.t.Helper()
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: w.ns}}
	pcs.Spec.Replicas = s.replicas
	pcs.Spec.Template.TerminationDelay = dur(s.delay)
	wt := grove.WorkloadTypeInference
	if s.training {
		wt = grove.WorkloadTypeTraining
	}
	annotations := map[string]string{}
	seed := map[string]any{}
	if w.p.seed {
		seed["workloadType"] = wt
		if s.training {
			ts := map[string]any{}
			if s.maxRestarts != nil {
				ts["maxRestarts"] = int64(*s.maxRestarts)
			}
			if s.maxRuntime != nil {
				ts["maxRuntime"] = s.maxRuntime.String()
			}
			seed["trainingSpec"] = ts
		}
	} else {
		annotations[api.AnnotationWorkloadType] = string(wt)
		if s.maxRestarts != nil {
			annotations[api.AnnotationMaxRestarts] = fmt.Sprint(*s.maxRestarts)
		}
		if s.maxRuntime != nil {
			annotations[api.AnnotationMaxRuntime] = s.maxRuntime.String()
		}
	}
	for _, c := range s.cliques {
		pcs.Spec.Template.Cliques = append(pcs.Spec.Template.Cliques, &grovev1alpha1.PodCliqueTemplateSpec{Name: c.name,
			Spec: grovev1alpha1.PodCliqueSpec{RoleName: c.name, Replicas: c.replicas, MinAvailable: ptr.To(c.minAvailable), PodSpec: podSpec()}})
	}
	var delays []string
	groupDelays := make([]any, 0, len(s.groups)) // the seed field of each config, in order
	for _, g := range s.groups {
		cfg := grovev1alpha1.PodCliqueScalingGroupConfig{Name: g.name, CliqueNames: g.cliques, Replicas: ptr.To(g.replicas), MinAvailable: ptr.To(g.minAvailable)}
		var seedDelay any
		switch {
		case g.delay == nil:
		case w.p.seed:
			seedDelay = g.delay.String()
		default:
			delays = append(delays, g.name+"="+g.delay.String())
		}
		groupDelays = append(groupDelays, seedDelay)
		pcs.Spec.Template.PodCliqueScalingGroupConfigs = append(pcs.Spec.Template.PodCliqueScalingGroupConfigs, cfg)
	}
	if len(delays) > 0 {
		annotations[api.AnnotationTerminationDelay] = strings.Join(delays, ",")
	}
	if len(annotations) > 0 {
		pcs.Annotations = annotations
	}
	w.createGrove(pcs, api.KindPodCliqueSet, func(u map[string]any) {
		for k, v := range seed {
			_ = unstructured.SetNestedField(u, v, "spec", k)
		}
		cfgs, _, _ := unstructured.NestedSlice(u, "spec", "template", "podCliqueScalingGroups")
		if len(cfgs) == 0 {
			return
		}
		for i := range cfgs {
			if d := groupDelays[i]; d != nil {
				cfgs[i].(map[string]any)["terminationDelay"] = d
			}
		}
		_ = unstructured.SetNestedSlice(u, cfgs, "spec", "template", "podCliqueScalingGroups")
	})
	for i := range s.replicas {
		w.createReplica(pcs, s, i)
	}
	return pcs
}

// createReplica plays Grove for one PodCliqueSet replica.
func (w *world) createReplica(pcs *grovev1alpha1.PodCliqueSet, s setSpec, idx int32) {
	w.t.Helper()
	inGroup := map[string]groupSpec{}
	for _, g := range s.groups {
		for _, c := range g.cliques {
			inGroup[c] = g
		}
		pcsg := &grovev1alpha1.PodCliqueScalingGroup{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d-%s", pcs.Name, idx, g.name), Namespace: w.ns,
			Labels:          map[string]string{api.LabelPartOf: pcs.Name, api.LabelPodCliqueSetReplicaIndex: fmt.Sprint(idx)},
			OwnerReferences: []metav1.OwnerReference{ownerRef(pcs, api.KindPodCliqueSet)},
		}, Spec: grovev1alpha1.PodCliqueScalingGroupSpec{Replicas: g.replicas, MinAvailable: ptr.To(g.minAvailable), CliqueNames: g.cliques}}
		w.createGrove(pcsg, api.KindPodCliqueScalingGroup, nil)
		for j := range g.replicas {
			for _, c := range s.cliques {
				if inGroup[c.name].name == g.name {
					w.createClique(pcs, pcsg, idx, j, c)
				}
			}
		}
	}
	for _, c := range s.cliques {
		if _, ok := inGroup[c.name]; !ok {
			w.createClique(pcs, nil, idx, 0, c)
		}
	}
}

// cliqueName is Grove's name of a PodClique.
func cliqueName(pcs string, idx int32, pcsg *grovev1alpha1.PodCliqueScalingGroup, j int32, clique string) string {
	if pcsg != nil {
		return fmt.Sprintf("%s-%d-%s", pcsg.Name, j, clique)
	}
	return fmt.Sprintf("%s-%d-%s", pcs, idx, clique)
}

func (w *world) createClique(pcs *grovev1alpha1.PodCliqueSet, pcsg *grovev1alpha1.PodCliqueScalingGroup, idx, j int32, c cliqueSpec) *grovev1alpha1.PodClique {
	w.t.Helper()
	labels := map[string]string{api.LabelPartOf: pcs.Name, api.LabelPodCliqueSetReplicaIndex: fmt.Sprint(idx)}
	owner := ownerRef(pcs, api.KindPodCliqueSet)
	if pcsg != nil {
		labels[api.LabelPodCliqueScalingGroup] = pcsg.Name
		labels[api.LabelPodCliqueScalingGroupReplica] = fmt.Sprint(j)
		owner = ownerRef(pcsg, api.KindPodCliqueScalingGroup)
	}
	pclq := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{
		Name: cliqueName(pcs.Name, idx, pcsg, j, c.name), Namespace: w.ns, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner},
	}, Spec: grovev1alpha1.PodCliqueSpec{RoleName: c.name, Replicas: c.replicas, MinAvailable: ptr.To(c.minAvailable), PodSpec: podSpec()}}
	w.createGrove(pclq, api.KindPodClique, nil)
	for k := range c.replicas {
		w.createPod(pclq, k)
	}
	return pclq
}

// createPod plays Grove's PodClique controller: one pod of a clique.
func (w *world) createPod(pclq *grovev1alpha1.PodClique, k int32) *corev1.Pod {
	w.t.Helper()
	labels := map[string]string{api.LabelPodClique: pclq.Name}
	for _, l := range []string{api.LabelPartOf, api.LabelPodCliqueSetReplicaIndex, api.LabelPodCliqueScalingGroup, api.LabelPodCliqueScalingGroupReplica} {
		if v, ok := pclq.Labels[l]; ok {
			labels[l] = v
		}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		GenerateName: fmt.Sprintf("%s-%d-", pclq.Name, k), Namespace: w.ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{ownerRef(pclq, api.KindPodClique)},
	}, Spec: podSpec()}
	w.create(p)
	return p
}

// createGrove creates o, a Grove object of a published type, as served —
// with the seed fields seed adds (the published type has none; nil adds
// none) — and reads back into o what the apiserver stored.
func (w *world) createGrove(o any, kind string, seed func(map[string]any)) {
	w.t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		w.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(kind))
	if seed != nil {
		seed(u.Object)
	}
	w.create(u)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) create(o client.Object) {
	w.t.Helper()
	if err := w.c.Create(w.ctx, o); err != nil {
		w.t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// pods lists the pods of a clique (by Grove's label).
func (w *world) pods(clique string) []corev1.Pod {
	w.t.Helper()
	var l corev1.PodList
	if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns), client.MatchingLabels{api.LabelPodClique: clique}); err != nil {
		w.t.Fatal(err)
	}
	return l.Items
}

// cliques lists the PodCliques of a set, as served (seed fields included).
func (w *world) cliques(pcs string) []grove.Clique {
	w.t.Helper()
	l, err := grove.ListCliques(w.ctx, w.c, client.InNamespace(w.ns), client.MatchingLabels{api.LabelPartOf: pcs})
	if err != nil {
		w.t.Fatal(err)
	}
	return l
}

func running(st *corev1.PodStatus) {
	st.Phase = corev1.PodRunning
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	st.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Ready: true, Image: "registry.example/trainer:1", ImageID: "x",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
}

func notReady(st *corev1.PodStatus) {
	st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	for i := range st.ContainerStatuses {
		st.ContainerStatuses[i].Ready = false
	}
}

func exited(code int32) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		st.Phase = corev1.PodSucceeded
		if code != 0 {
			st.Phase = corev1.PodFailed
		}
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "registry.example/trainer:1", ImageID: "x",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}}}
	}
}

// runAll makes every pod of a set Running and Ready, then waits until shepherd
// has marked every clique available.
func (w *world) runAll(pcs string) {
	w.t.Helper()
	w.runPods(pcs)
	w.waitAvailable(pcs)
}

// waitAvailable waits until shepherd has marked every clique of a set
// available, in the set's record.
func (w *world) waitAvailable(pcs string) {
	w.t.Helper()
	for _, c := range w.cliques(pcs) {
		w.waitRecord(pcs, c.Name, "wasAvailable", func(r shepherdv1alpha1.CliqueRecord) bool { return r.WasAvailable })
	}
}

// waitRecord waits until the set's record says what ok wants about a
// clique (its current incarnation), and returns that entry.
func (w *world) waitRecord(pcs, clique, what string, ok func(shepherdv1alpha1.CliqueRecord) bool) shepherdv1alpha1.CliqueRecord {
	w.t.Helper()
	var r shepherdv1alpha1.CliqueRecord
	w.eventually(fmt.Sprintf("PodClique %s: %s in the record of %s", clique, what, pcs), func() (bool, error) {
		c, err := w.getClique(w.ctx, clique)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		r = w.cliqueRecord(pcs, clique)
		return r.UID == c.UID && ok(r), nil
	})
	return r
}

// breachedInRecord says a clique's breach is under way.
func breachedInRecord(r shepherdv1alpha1.CliqueRecord) bool { return r.BreachedSince != nil }

// runPods makes every pod of a set Running and Ready.
func (w *world) runPods(pcs string) {
	w.t.Helper()
	for _, c := range w.cliques(pcs) {
		for _, p := range w.pods(c.Name) {
			cluster.SetPodStatus(w.t, w.c, &p, running)
		}
	}
}

// losePod deletes one pod of a clique, as a node failure would.
func (w *world) losePod(clique string) {
	w.t.Helper()
	pods := w.pods(clique)
	if len(pods) == 0 {
		w.t.Fatalf("clique %s has no pod to lose", clique)
	}
	if err := w.c.Delete(w.ctx, &pods[0]); err != nil {
		w.t.Fatal(err)
	}
}

// eventually polls cond until it holds, failing the test with what after the
// timeout.
func (w *world) eventually(what string, cond func() (bool, error)) {
	w.t.Helper()
	err := testkit.Poll(100*time.Millisecond, w.timeout, cond)
	if err != nil {
		w.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitClique waits until a PodClique satisfies ok.
func (w *world) waitClique(name, what string, ok func(*grove.Clique) bool) *grove.Clique {
	w.t.Helper()
	var c *grove.Clique
	w.eventually(fmt.Sprintf("PodClique %s: %s", name, what), func() (bool, error) {
		var err error
		if c, err = w.getClique(w.ctx, name); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ok(c), nil
	})
	return c
}

// getClique reads a PodClique as served.
func (w *world) getClique(ctx context.Context, name string) (*grove.Clique, error) {
	u := grove.NewObject(api.KindPodClique)
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, u); err != nil {
		return nil, err
	}
	c, err := grove.CliqueFrom(u)
	return &c, err
}

// waitGone waits until the named PodCliques no longer exist.
func (w *world) waitGone(names ...string) {
	w.t.Helper()
	for _, n := range names {
		w.eventually("PodClique "+n+" deleted", func() (bool, error) {
			err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: n}, grove.NewObject(api.KindPodClique))
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	}
}

// mustExist fails unless every named PodClique still exists.
func (w *world) mustExist(names ...string) {
	w.t.Helper()
	for _, n := range names {
		if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: n}, grove.NewObject(api.KindPodClique)); err != nil {
			w.t.Errorf("PodClique %s: %v (want it kept)", n, err)
		}
	}
}

// barrier proves shepherd has had time to act on everything breached before
// it was called, without sleeping: it breaches a control PodCliqueSet whose
// delay is at least as long as any scenario's and waits for shepherd to
// terminate it. Anything shepherd was going to delete earlier is gone by then.
func (w *world) barrier(delay time.Duration) {
	w.t.Helper()
	name := fmt.Sprintf("control-%d", time.Now().UnixNano())
	w.createSet(setSpec{name: name, replicas: 1, delay: &delay, cliques: []cliqueSpec{{name: "c", replicas: 1, minAvailable: 1}}})
	w.runAll(name)
	clique := cliqueName(name, 0, nil, 0, "c")
	w.losePod(clique)
	w.waitGone(clique)
}

// events lists the events of a reason in the namespace.
func (w *world) events(reason string) []eventsv1.Event {
	w.t.Helper()
	var l eventsv1.EventList
	if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range l.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an event of reason about the named object.
func (w *world) waitEvent(reason, name string) eventsv1.Event {
	w.t.Helper()
	var got eventsv1.Event
	w.eventually("event "+reason+" on "+name, func() (bool, error) {
		for _, e := range w.events(reason) {
			if e.Regarding.Name == name {
				got = e
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// rawMerge is a JSON merge patch given as text.
func rawMerge(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

// setRollingUpdate plays Grove writing a PodClique's update progress: the
// seed's status.rollingUpdateProgress, or Grove's status.updateProgress.
func (w *world) setRollingUpdate(name string, ended bool) {
	w.t.Helper()
	c := grove.NewObject(api.KindPodClique)
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, c); err != nil {
		w.t.Fatal(err)
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	progress := map[string]any{"updateStartedAt": now}
	if ended {
		progress["updateEndedAt"] = now
	}
	field := "rollingUpdateProgress"
	if !w.p.seed {
		field = "updateProgress"
		progress["podCliqueSetGenerationHash"], progress["podTemplateHash"] = "h2", "t2"
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{field: progress}})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.c.Status().Patch(w.ctx, c, client.RawPatch(types.MergePatchType, body), client.FieldOwner(groveManager)); err != nil {
		w.t.Fatal(err)
	}
}

// groveBreach plays Grove's PodClique controller writing the clique's
// MinAvailableBreached, as its own field manager, with lastTransitionTime
// since.
func (w *world) groveBreach(name string, status metav1.ConditionStatus, reason string, since time.Time) {
	w.t.Helper()
	err := testkit.Poll(50*time.Millisecond, pollTimeout, func(ctx context.Context) (bool, error) {
		c, err := w.getClique(ctx, name)
		if err != nil {
			return false, err
		}
		conds := c.Status.Conditions
		meta.RemoveStatusCondition(&conds, api.ConditionMinAvailableBreached)
		conds = append(conds, metav1.Condition{Type: api.ConditionMinAvailableBreached, Status: status, Reason: reason,
			Message: "written by the test playing Grove", LastTransitionTime: metav1.NewTime(since.Truncate(time.Second))})
		patched := c.Served.DeepCopy()
		list, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
			C []metav1.Condition `json:"conditions"`
		}{conds})
		if err != nil {
			return false, err
		}
		if err := unstructured.SetNestedField(patched.Object, list["conditions"], "status", "conditions"); err != nil {
			return false, err
		}
		if err := w.c.Status().Patch(ctx, patched, client.MergeFromWithOptions(c.Served, client.MergeFromWithOptimisticLock{}), client.FieldOwner(groveManager)); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatalf("playing Grove on PodClique %s: %v", name, err)
	}
}

// managers lists the field managers of an object's managedFields.
func managers(o metav1.Object) []string {
	var out []string
	for _, e := range o.GetManagedFields() {
		out = append(out, e.Manager)
	}
	return out
}

// quiet fails unless ok holds on every poll during d: what shepherd must not
// do, checked for longer than it would take to do it.
func (w *world) quiet(what string, d time.Duration, ok func() error) {
	w.t.Helper()
	testkit.Consistently(w.t, d, what, ok)
}
