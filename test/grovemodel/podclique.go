package grovemodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	grove "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// reconcilePCLQ is the PodClique controller (controller/podclique:
// reconciler.go, reconcilespec.go, reconciledelete.go, reconcilestatus.go):
// the finalizer removed on deletion (the GC deletes the pods) or added, the
// pods synced, observedGeneration, then status — from the pods as listed at
// the start, as Grove memoizes that list for the whole reconcile.
func (m *model) reconcilePCLQ(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	u, err := m.getLive(ctx, "PodClique", req.NamespacedName, finalizerPCLQ)
	if err != nil || u == nil {
		return reconcile.Result{}, err
	}
	var pclq grove.PodClique
	if err := convert(u.Object, &pclq); err != nil {
		return reconcile.Result{}, err
	}
	_, pcs, err := m.getPCS(ctx, types.NamespacedName{Namespace: pclq.Namespace, Name: pclq.Labels[labelPartOf]})
	if err != nil {
		return reconcile.Result{}, err
	}
	var list corev1.PodList
	if err := m.c.List(ctx, &list, client.InNamespace(pclq.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	var pods []*corev1.Pod // Grove selects by a field index of the controller's UID
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], u) {
			pods = append(pods, &list.Items[i])
		}
	}
	created, syncErr := m.syncPods(ctx, u, &pclq, pcs, pods)
	if syncErr == nil {
		if syncErr = m.patchObservedGeneration(ctx, u); syncErr == nil {
			pclq.Status.ObservedGeneration = ptr.To(u.GetGeneration())
		}
	}
	if err := m.writeStatus(ctx, u, &pclq, pcs, pods); err != nil {
		return reconcile.Result{}, errors.Join(syncErr, err)
	}
	if created {
		return reconcile.Result{RequeueAfter: podGangDelay}, syncErr
	}
	return reconcile.Result{}, syncErr
}

// syncPods is components/pod (syncflow.go, pod.go): pods created up to
// replicas — so a deleted pod is replaced, in the lowest free hostname
// index — or the excess deleted in DeletionSorter's order, then the PodGang
// gate lifted from the pods that existed when the reconcile began. A Failed
// pod still counts toward replicas: it is not replaced.
func (m *model) syncPods(ctx context.Context, u *unstructured.Unstructured, pclq *grove.PodClique, pcs *grove.PodCliqueSet, pods []*corev1.Pod) (created bool, err error) {
	var live []*corev1.Pod
	used := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed { // index/tracker.go
				used[p.Spec.Hostname[strings.LastIndex(p.Spec.Hostname, "-")+1:]] = true
			}
		}
	}
	for n, index := int(pclq.Spec.Replicas)-len(live), 0; n > 0; n-- {
		for used[strconv.Itoa(index)] {
			index++
		}
		used[strconv.Itoa(index)] = true
		if err := m.c.Create(ctx, m.buildPod(u, pclq, pcs, index)); err != nil {
			return created, fmt.Errorf("creating a pod of PodClique %s: %w", pclq.Name, err)
		}
		created = true
	}
	if excess := len(live) - int(pclq.Spec.Replicas); excess > 0 {
		slices.SortStableFunc(live, deletionOrder(pclq.Labels[labelTemplateHash]))
		for _, p := range live[:excess] {
			if err := client.IgnoreNotFound(m.c.Delete(ctx, p)); err != nil {
				return created, fmt.Errorf("deleting pod %s: %w", p.Name, err)
			}
		}
	}
	for _, p := range pods {
		if i := slices.IndexFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podGangGate }); i >= 0 {
			before := p.DeepCopy()
			p.Spec.SchedulingGates = slices.Delete(p.Spec.SchedulingGates, i, i+1)
			if err := client.IgnoreNotFound(m.c.Patch(ctx, p, client.MergeFrom(before))); err != nil {
				return created, fmt.Errorf("lifting the gate of pod %s: %w", p.Name, err)
			}
		}
	}
	return created, nil
}

// buildPod is components/pod/pod.go (buildResource): a generated name,
// Grove's labels over the PodClique's, its annotations, the PodGang gate,
// the default scheduler unless the template names one, hostname
// <podclique>-<index> and subdomain <podcliqueset>-<replica>.
func (m *model) buildPod(u *unstructured.Unstructured, pclq *grove.PodClique, pcs *grove.PodCliqueSet, index int) *corev1.Pod {
	lbls := groveLabels(pcs.Name)
	maps.Copy(lbls, pclq.Labels)
	maps.Copy(lbls, map[string]string{labelPodClique: pclq.Name, labelPodIndex: strconv.Itoa(index)})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pclq.Name + "-", Namespace: pclq.Namespace, Labels: lbls, Annotations: maps.Clone(pclq.Annotations)},
		Spec:       *pclq.Spec.PodSpec.DeepCopy(),
	}
	_ = controllerutil.SetControllerReference(u, pod, m.c.Scheme()) // a new pod: cannot fail
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: podGangGate})
	pod.Spec.SchedulerName = cmp.Or(pod.Spec.SchedulerName, corev1.DefaultSchedulerName)
	pod.Spec.Hostname = fmt.Sprintf("%s-%d", pclq.Name, index)
	pod.Spec.Subdomain = fmt.Sprintf("%s-%s", pcs.Name, pclq.Labels[labelReplicaIndex])
	return pod
}

// deletionOrder is DeletionSorter (components/pod/deletionsort.go): first
// unbound pods, then Pending before Unknown before Running, not ready, of
// another template hash, newest.
func deletionOrder(hash string) func(a, b *corev1.Pod) int {
	phase := map[corev1.PodPhase]int{corev1.PodUnknown: 1, corev1.PodRunning: 2}
	key := func(p *corev1.Pod) []bool {
		return []bool{p.Spec.NodeName != "", phase[p.Status.Phase] > 0, phase[p.Status.Phase] > 1, podCond(p, corev1.PodReady), p.Labels[labelTemplateHash] == hash}
	}
	return func(a, b *corev1.Pod) int {
		if c := slices.CompareFunc(key(a), key(b), func(x, y bool) int { return cmp.Compare(b2i(x), b2i(y)) }); c != 0 {
			return c
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// podCond reports whether a pod's condition of type t is True.
func podCond(p *corev1.Pod, t corev1.PodConditionType) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == t && c.Status == corev1.ConditionTrue })
}

// exitedNonZero reports a container whose last termination had a non-zero
// exit code (utils/kubernetes/pod.go: GetContainerStatusIfTerminatedErroneously).
func exitedNonZero(statuses []corev1.ContainerStatus) bool {
	return slices.ContainsFunc(statuses, func(s corev1.ContainerStatus) bool {
		return s.LastTerminationState.Terminated != nil && s.LastTerminationState.Terminated.ExitCode != 0
	})
}

// writeStatus is reconcilestatus.go. Pods are counted by category
// (utils/kubernetes/pod.go: CategorizePodsByConditionType): the phase plays
// no part, so a Failed pod still counts as scheduled and — unless a
// container's last termination was non-zero or a started container is not
// ready — as ready or starting, not as unavailable. The conditions are set
// once observedGeneration is: MinAvailableBreached is True with reason
// ScheduledReplicasBelowMinAvailable while fewer than minAvailable pods are
// scheduled (a gang never scheduled included), with InsufficientReadyPods
// while scheduled − failing − started-not-ready falls short. Status is
// merge-patched when it changed.
func (m *model) writeStatus(ctx context.Context, u *unstructured.Unstructured, pclq *grove.PodClique, pcs *grove.PodCliqueSet, pods []*corev1.Pod) error {
	before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pclq.Status)
	if err != nil {
		return err
	}
	st := &pclq.Status
	var terminating, ready, gated, scheduled, failing, starting, updated int32
	hash := pclq.Labels[labelTemplateHash]
	for _, p := range pods {
		if podCond(p, corev1.PodScheduled) {
			scheduled++
		} else if slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated
		}) {
			gated++
		}
		if p.DeletionTimestamp != nil {
			terminating++
		}
		if hash != "" && p.Labels[labelTemplateHash] == hash {
			updated++
		}
		switch {
		case podCond(p, corev1.PodReady):
			ready++
		case exitedNonZero(p.Status.InitContainerStatuses) || exitedNonZero(p.Status.ContainerStatuses):
			failing++
		case slices.ContainsFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return ptr.Deref(s.Started, false) && !s.Ready }):
			starting++
		}
	}
	st.Replicas, st.ReadyReplicas, st.ScheduleGatedReplicas, st.ScheduledReplicas = int32(len(pods))-terminating, ready, gated, scheduled
	if hash != "" {
		st.UpdatedReplicas = updated
	}
	if st.ObservedGeneration != nil {
		if pclq.Spec.MinAvailable == nil {
			return fmt.Errorf("PodClique %s has no minAvailable (Grove's defaulting webhook sets it)", pclq.Name)
		}
		minAvailable, available := *pclq.Spec.MinAvailable, scheduled-failing-starting
		if scheduled < minAvailable {
			setCond(st, condPodCliqueScheduled, metav1.ConditionFalse, "InsufficientScheduledPods", "%d pods scheduled, minAvailable %d", scheduled, minAvailable)
			setCond(st, CondMinAvailableBreached, metav1.ConditionTrue, ReasonScheduledReplicasBelowMinAvailable, "%d pods scheduled, minAvailable %d", scheduled, minAvailable)
		} else {
			setCond(st, condPodCliqueScheduled, metav1.ConditionTrue, "SufficientScheduledPods", "%d pods scheduled, minAvailable %d", scheduled, minAvailable)
			if available < minAvailable {
				setCond(st, CondMinAvailableBreached, metav1.ConditionTrue, ReasonInsufficientReadyPods, "%d pods ready or starting, minAvailable %d", available, minAvailable)
			} else {
				setCond(st, CondMinAvailableBreached, metav1.ConditionFalse, ReasonSufficientReadyPods, "%d pods ready or starting, minAvailable %d", available, minAvailable)
			}
		}
	}
	if _, inGroup := pclq.Labels[labelPCSG]; !inGroup { // the HPA selector of the scale subresource
		st.Selector = ptr.To(labels.SelectorFromSet(groveLabels(pcs.Name, labelPodClique, pclq.Name)).String())
	}
	after, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil || reflect.DeepEqual(before, after) {
		return err
	}
	base := u.DeepCopy()
	u.Object["status"] = after
	if err := m.c.Status().Patch(ctx, u, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patching the status of PodClique %s: %w", pclq.Name, err)
	}
	return nil
}

// setCond sets a condition whose status, reason or message changed; its
// lastTransitionTime moves only with its status (HasConditionChanged and
// meta.SetStatusCondition).
func setCond(st *grove.PodCliqueStatus, typ string, status metav1.ConditionStatus, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != status || c.Reason != reason || c.Message != msg {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()})
	}
}
