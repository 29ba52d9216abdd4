package grovemodel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	grove "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// reconcilePCS is the PodCliqueSet controller (controller/podcliqueset:
// reconciler.go, reconcilespec.go, reconciledelete.go): the finalizer
// removed on deletion (the GC does the rest) or added, then Grove's
// component groups in order — gang termination, standalone PodCliques,
// PodCliqueScalingGroups — and observedGeneration. A breach waiting out
// terminationDelay requeues after the retry interval.
func (m *model) reconcilePCS(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	u, pcs, err := m.getPCS(ctx, req.NamespacedName)
	if err != nil || u == nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if u.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, m.patchFinalizer(ctx, u, finalizerPCS, false)
	}
	waiting := false
	err = m.patchFinalizer(ctx, u, finalizerPCS, true)
	for _, step := range []func() error{
		func() (err error) { waiting, err = m.gangTerminate(ctx, pcs); return err },
		func() error { return m.syncPodCliques(ctx, u, pcs) },
		func() error { return m.syncScalingGroups(ctx, u, pcs) },
		func() error { return m.patchObservedGeneration(ctx, u) },
	} {
		if err == nil {
			err = step()
		}
	}
	if waiting {
		return reconcile.Result{RequeueAfter: m.retry}, err
	}
	return reconcile.Result{}, err
}

// syncPodCliques is components/podclique/podclique.go: the PodCliques of
// replicas scaled away deleted, then a CreateOrPatch (a merge patch) of each
// standalone PodClique of each replica.
func (m *model) syncPodCliques(ctx context.Context, u *unstructured.Unstructured, pcs *grove.PodCliqueSet) error {
	owned, err := m.listOwned(ctx, "PodClique", u, groveLabels(pcs.Name, labelComponent, "pcs-podclique"))
	if err != nil {
		return err
	}
	for _, p := range owned {
		if r, _ := strconv.Atoi(p.GetLabels()[labelReplicaIndex]); r >= int(pcs.Spec.Replicas) {
			if err := client.IgnoreNotFound(m.c.Delete(ctx, &p)); err != nil {
				return fmt.Errorf("deleting PodClique %s: %w", p.GetName(), err)
			}
		}
	}
	for r := range int(pcs.Spec.Replicas) {
		for _, clique := range standalone(pcs) {
			obj := named("PodClique", pcs.Namespace, fmt.Sprintf("%s-%d-%s", pcs.Name, r, clique))
			exists := slices.ContainsFunc(owned, func(p unstructured.Unstructured) bool { return p.GetName() == obj.GetName() })
			if _, err := controllerutil.CreateOrPatch(ctx, m.c, obj, func() error {
				return m.buildPodClique(obj, u, pcs, exists, labelReplicaIndex, strconv.Itoa(r), labelComponent, "pcs-podclique",
					labelPodGang, fmt.Sprintf("%s-%d", pcs.Name, r))
			}); err != nil {
				return fmt.Errorf("creating or patching PodClique %s: %w", obj.GetName(), err)
			}
		}
	}
	return nil
}

// buildPodClique is the mutate of a PodClique (buildResource of
// podcliqueset/components/podclique/podclique.go and of
// podcliquescalinggroup/components/podclique/podclique.go): controller
// reference, finalizer, labels = the template's under Grove's, annotations
// = the template's less grove.io/topology-name — both replaced wholesale, so
// what another writer added is gone — and spec = the template's, keeping
// the replicas of an existing PodClique (an HPA's).
func (m *model) buildPodClique(obj, owner *unstructured.Unstructured, pcs *grove.PodCliqueSet, exists bool, kv ...string) error {
	tmpl := templateFor(pcs, obj.GetName())
	if tmpl == nil {
		return fmt.Errorf("no clique of PodCliqueSet %s matches PodClique %s", pcs.Name, obj.GetName())
	}
	if err := controllerutil.SetControllerReference(owner, obj, m.c.Scheme()); err != nil {
		return err
	}
	controllerutil.AddFinalizer(obj, finalizerPCLQ)
	labels := maps.Clone(tmpl.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, groveLabels(pcs.Name, append(kv, labelName, obj.GetName(),
		labelTemplateHash, templateHash(tmpl, pcs.Spec.Template.PriorityClassName))...))
	obj.SetLabels(labels)
	annotations := maps.Clone(tmpl.Annotations)
	delete(annotations, annotationTopology)
	if len(annotations) == 0 {
		annotations = nil
	}
	obj.SetAnnotations(annotations)
	var spec grove.PodCliqueSpec
	if err := convert(tmpl.Spec, &spec); err != nil {
		return err
	}
	if exists {
		replicas, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		spec.Replicas = int32(replicas)
	}
	spec.StartsAfter = nil // CliqueStartupTypeAnyOrder; the other types are not modelled
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	obj.Object["spec"] = s
	return err
}

// syncScalingGroups is podcliqueset/components/podcliquescalinggroup: a
// CreateOrPatch of one group per config and replica (replicas set at
// creation only), and groups no longer expected deleted.
func (m *model) syncScalingGroups(ctx context.Context, u *unstructured.Unstructured, pcs *grove.PodCliqueSet) error {
	owned, err := m.listOwned(ctx, "PodCliqueScalingGroup", u, groveLabels(pcs.Name, labelComponent, "pcs-podcliquescalinggroup"))
	if err != nil {
		return err
	}
	var expected []string
	for r := range int(pcs.Spec.Replicas) {
		for _, cfg := range pcs.Spec.Template.PodCliqueScalingGroupConfigs {
			obj := named("PodCliqueScalingGroup", pcs.Namespace, fmt.Sprintf("%s-%d-%s", pcs.Name, r, cfg.Name))
			expected = append(expected, obj.GetName())
			if _, err := controllerutil.CreateOrPatch(ctx, m.c, obj, func() error {
				if err := controllerutil.SetControllerReference(u, obj, m.c.Scheme()); err != nil {
					return err
				}
				controllerutil.AddFinalizer(obj, finalizerPCSG)
				spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
				if spec == nil || obj.GetUID() == "" {
					spec = map[string]any{"replicas": int64(ptr.Deref(cfg.Replicas, 1))}
				}
				delete(spec, "minAvailable")
				if cfg.MinAvailable != nil {
					spec["minAvailable"] = int64(*cfg.MinAvailable)
				}
				spec["cliqueNames"] = toAny(cfg.CliqueNames)
				obj.Object["spec"] = spec
				obj.SetLabels(groveLabels(pcs.Name, labelName, obj.GetName(), labelComponent, "pcs-podcliquescalinggroup", labelReplicaIndex, strconv.Itoa(r)))
				obj.SetAnnotations(maps.Clone(cfg.Annotations))
				return nil
			}); err != nil {
				return fmt.Errorf("creating or patching PodCliqueScalingGroup %s: %w", obj.GetName(), err)
			}
		}
	}
	for _, g := range owned {
		if !slices.Contains(expected, g.GetName()) {
			if err := client.IgnoreNotFound(m.c.Delete(ctx, &g)); err != nil {
				return fmt.Errorf("deleting PodCliqueScalingGroup %s: %w", g.GetName(), err)
			}
		}
	}
	return nil
}

// gangTerminate is podcliqueset/components/podcliquesetreplica/gangterminate.go
// for standalone PodCliques. A replica one of whose standalone PodCliques is
// missing is skipped. A PodClique is a candidate when MinAvailableBreached
// is True and it was ever scheduled (WasPCLQEverScheduled: PodCliqueScheduled
// True, or False since well after its creation) — so a gang never scheduled
// is never terminated. Once a candidate's breach has lasted terminationDelay,
// one deletecollection by label selector deletes all the replica's
// PodCliques, those of its scaling groups too. It reports whether a
// candidate is still waiting.
func (m *model) gangTerminate(ctx context.Context, pcs *grove.PodCliqueSet) (waiting bool, err error) {
	if pcs.Spec.Template.TerminationDelay == nil {
		return false, fmt.Errorf("PodCliqueSet %s has no terminationDelay (Grove's defaulting webhook sets it)", pcs.Name)
	}
	delay, now := pcs.Spec.Template.TerminationDelay.Duration, time.Now()
replicas:
	for r := range int(pcs.Spec.Replicas) {
		var waits []time.Duration
		for _, clique := range standalone(pcs) {
			obj := named("PodClique", pcs.Namespace, fmt.Sprintf("%s-%d-%s", pcs.Name, r, clique))
			if err := m.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
				continue replicas
			} else if err != nil {
				return false, err
			}
			var p grove.PodClique
			if err := convert(obj.Object, &p); err != nil {
				return false, err
			}
			breach := meta.FindStatusCondition(p.Status.Conditions, CondMinAvailableBreached)
			sched := meta.FindStatusCondition(p.Status.Conditions, condPodCliqueScheduled)
			if breach != nil && breach.Status == metav1.ConditionTrue && sched != nil &&
				(sched.Status == metav1.ConditionTrue || sched.LastTransitionTime.After(p.CreationTimestamp.Add(InitialScheduleGrace))) {
				waits = append(waits, delay-now.Sub(breach.LastTransitionTime.Time))
			}
		}
		if len(waits) == 0 || slices.Min(waits) > 0 {
			waiting = waiting || len(waits) > 0
			continue
		}
		if err := m.c.DeleteAllOf(ctx, newObj("PodClique"), client.InNamespace(pcs.Namespace),
			client.MatchingLabels(groveLabels(pcs.Name, labelReplicaIndex, strconv.Itoa(r)))); err != nil {
			return false, fmt.Errorf("deleting the PodCliques of replica %d of %s: %w", r, pcs.Name, err)
		}
	}
	return waiting, nil
}

// reconcilePCSG is the PodCliqueScalingGroup controller
// (controller/podcliquescalinggroup, components/podclique/sync.go): the
// finalizer, then its PodCliques: created when missing and, only under
// updateStrategy OnDelete, patched from the template — under the default
// RollingRecreate an existing group PodClique keeps whatever it has.
func (m *model) reconcilePCSG(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	u, err := m.getLive(ctx, "PodCliqueScalingGroup", req.NamespacedName, finalizerPCSG)
	if err != nil || u == nil {
		return reconcile.Result{}, err
	}
	_, pcs, err := m.getPCS(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetLabels()[labelPartOf]})
	if err != nil {
		return reconcile.Result{}, err
	}
	var g grove.PodCliqueScalingGroup
	if err := convert(u.Object, &g); err != nil {
		return reconcile.Result{}, err
	}
	owned, err := m.listOwned(ctx, "PodClique", u, groveLabels(pcs.Name, labelComponent, "pcsg-podclique", labelPCSG, g.Name))
	if err != nil {
		return reconcile.Result{}, err
	}
	onDelete := pcs.Spec.UpdateStrategy != nil && pcs.Spec.UpdateStrategy.Type == "OnDelete"
	minAvailable, base := int(ptr.Deref(g.Spec.MinAvailable, 1)), fmt.Sprintf("%s-%s", pcs.Name, g.Labels[labelReplicaIndex])
	for j := range int(g.Spec.Replicas) {
		for _, clique := range g.Spec.CliqueNames {
			obj := named("PodClique", g.Namespace, fmt.Sprintf("%s-%d-%s", g.Name, j, clique))
			exists := slices.ContainsFunc(owned, func(p unstructured.Unstructured) bool { return p.GetName() == obj.GetName() })
			if exists && !onDelete {
				continue
			}
			// Group replicas below minAvailable join the replica's base
			// PodGang; the others make scaled PodGangs of their own
			// (api/common/namegen.go).
			kv := []string{labelComponent, "pcsg-podclique", labelPCSG, g.Name, labelPodGang, base,
				labelReplicaIndex, g.Labels[labelReplicaIndex], labelPCSGReplicaIndex, strconv.Itoa(j)}
			if j >= minAvailable {
				kv = append(kv, labelPodGang, fmt.Sprintf("%s-%d", g.Name, j-minAvailable), labelBasePodGang, base)
			}
			build := func() error { return m.buildPodClique(obj, u, pcs, exists, kv...) }
			if onDelete {
				_, err = controllerutil.CreateOrPatch(ctx, m.c, obj, build)
			} else if err = build(); err == nil {
				err = client.IgnoreAlreadyExists(m.c.Create(ctx, obj))
			}
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("creating PodClique %s: %w", obj.GetName(), err)
			}
		}
	}
	return reconcile.Result{}, m.patchObservedGeneration(ctx, u)
}

// getPCS reads a PodCliqueSet and its typed view.
func (m *model) getPCS(ctx context.Context, key types.NamespacedName) (*unstructured.Unstructured, *grove.PodCliqueSet, error) {
	u := newObj("PodCliqueSet")
	if err := m.c.Get(ctx, key, u); err != nil {
		return nil, nil, fmt.Errorf("reading PodCliqueSet %s: %w", key, err)
	}
	var pcs grove.PodCliqueSet
	return u, &pcs, convert(u.Object, &pcs)
}

// standalone is the cliques in no scaling group, in template order.
func standalone(pcs *grove.PodCliqueSet) []string {
	var out []string
	for _, c := range pcs.Spec.Template.Cliques {
		if !slices.ContainsFunc(pcs.Spec.Template.PodCliqueScalingGroupConfigs, func(g grove.PodCliqueScalingGroupConfig) bool {
			return slices.Contains(g.CliqueNames, c.Name)
		}) {
			out = append(out, c.Name)
		}
	}
	return out
}

// templateFor is the first clique whose name ends the PodClique's name:
// Grove's lookup (lo.FindIndexOf with strings.HasSuffix), quirks included.
func templateFor(pcs *grove.PodCliqueSet, pclq string) *grove.PodCliqueTemplateSpec {
	for _, c := range pcs.Spec.Template.Cliques {
		if c != nil && strings.HasSuffix(pclq, c.Name) {
			return c
		}
	}
	return nil
}
