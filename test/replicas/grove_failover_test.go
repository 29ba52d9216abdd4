package replicas

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// trainingSet plays the user and Grove: a Training PodCliqueSet of one
// replica, one PodClique "w" of one pod (maxRestarts 1), its PodClique and
// its pod, Running and Ready.
func trainingSet(t *testing.T, ns, name string) *corev1.Pod { return groveSet(t, ns, name, nil) }

// groveSet is trainingSet, or with a terminationDelay an Inference set
// (gang termination on).
func groveSet(t *testing.T, ns, name string, delay *time.Duration) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	spec := grovev1alpha1.PodCliqueSpec{RoleName: "w", Replicas: 1, MinAvailable: ptr.To[int32](1), PodSpec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "w", Image: "busybox"}},
	}}
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	pcs.Spec.Replicas = 1
	// The seed CRDs' fields, which Grove's published type lacks.
	seed := map[string]any{"workloadType": grove.WorkloadTypeTraining, "trainingSpec": map[string]any{"maxRestarts": int64(1)}}
	if delay != nil {
		seed = map[string]any{"workloadType": grove.WorkloadTypeInference}
		pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: *delay}
		spec.PodSpec.RestartPolicy = corev1.RestartPolicyAlways
	}
	pcs.Spec.Template.Cliques = []*grovev1alpha1.PodCliqueTemplateSpec{{Name: "w", Spec: spec}}
	served := grove.SetOf(pcs).Served
	for k, v := range seed {
		served.Object["spec"].(map[string]any)[k] = v
	}
	if err := env.Client.Create(ctx, served); err != nil {
		t.Fatalf("creating PodCliqueSet %s: %v", name, err)
	}
	pcs.UID = served.GetUID()
	labels := map[string]string{api.LabelPartOf: name, api.LabelPodCliqueSetReplicaIndex: "0"}
	pclq := &grovev1alpha1.PodClique{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-0-w", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: grovev1alpha1.GroupVersion.String(), Kind: api.KindPodCliqueSet,
			Name: name, UID: pcs.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}, Spec: spec}
	servedClique := grove.CliqueOf(pclq).Served
	if err := env.Client.Create(ctx, servedClique); err != nil {
		t.Fatalf("creating PodClique %s: %v", pclq.Name, err)
	}
	pclq.UID = servedClique.GetUID()
	podLabels := map[string]string{api.LabelPartOf: name, api.LabelPodCliqueSetReplicaIndex: "0", api.LabelPodClique: pclq.Name}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pclq.Name + "-0", Labels: podLabels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: grovev1alpha1.GroupVersion.String(), Kind: api.KindPodClique,
			Name: pclq.Name, UID: pclq.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}, Spec: spec.PodSpec}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	cluster.SetPodStatus(t, env.Client, pod, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		st.StartTime = ptr.To(metav1.Now())
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	})
	return pod
}

// restarted counts the sets whose restartCount is at least 1; more than 1
// is an error (each set fails once).
func restarted(ctx context.Context, ns string, sets []string) (int, error) {
	var l shepherdv1alpha1.WorkloadRecordList
	if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range l.Items {
		count := ptr.Deref(rec.Status.RestartCount, 0)
		if count > 1 {
			return n, fmt.Errorf("PodCliqueSet %s restartCount %d, want at most 1", rec.Spec.WorkloadRef.Name, count)
		}
		if count == 1 {
			n++
		}
	}
	return n, nil
}

// TestFailoverMidTrainingRestarts: 30 Training PodCliqueSets (budget 1)
// whose worker crashes one a second; the leader is SIGKILLed after 8
// restarts; the standby takes over and restarts the rest. Every set is
// restarted exactly once — restartCount 1, its pod deleted by exactly one
// successful delete — with exactly one ReplicaRestarting Event; a restart
// the leader had begun (markers written) is finished by the survivor, not
// begun again.
func TestFailoverMidTrainingRestarts(t *testing.T) {
	p := startPair(t, seed)
	ns := env.Namespace(t)
	ctx := context.Background()

	sets := make([]string, burstJobs)
	pods := make([]*corev1.Pod, burstJobs)
	podNames := make([]string, burstJobs)
	for i := range sets {
		sets[i] = fmt.Sprintf("train-%02d", i)
		pods[i] = trainingSet(t, ns, sets[i])
		podNames[i] = pods[i].Name
	}
	// shepherd (the leader) marks every clique available before any crash.
	if err := testkit.Poll(200*time.Millisecond, longTimeout, func(ctx context.Context) (bool, error) {
		var l shepherdv1alpha1.WorkloadRecordList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		n := 0
		for _, rec := range l.Items {
			for _, c := range rec.Status.Cliques {
				if c.WasAvailable {
					n++
				}
			}
		}
		return n == burstJobs, nil
	}); err != nil {
		t.Fatalf("the PodCliques never all became available: %v", err)
	}

	// The kubelet's part: one worker crashes every second, through the kill.
	start := time.Now()
	crashErr := make(chan error, 1)
	go func() {
		defer close(crashErr)
		for i, pod := range pods {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
			orig := pod.DeepCopy()
			pod.Status.Phase = corev1.PodFailed
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "w", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
			if err := env.Client.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
				crashErr <- fmt.Errorf("crashing %s: %w", pod.Name, err)
				return
			}
		}
	}()

	if err := testkit.Poll(100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		n, err := restarted(ctx, ns, sets)
		return n >= enforcedBeforeKill, err
	}); err != nil {
		t.Fatalf("restarts by the leader before the kill: %v", err)
	}
	if got, _, err := cluster.LeaseHolder(ctx, p.pl.Client, p.leaseNS, leaseName); err != nil || got != p.leaderID {
		t.Fatalf("before the kill the Lease holder is %q (err %v), want the first replica %q", got, err, p.leaderID)
	}
	p.leader.Kill()
	killedAt := time.Now()
	if n, _ := restarted(ctx, ns, sets); n >= burstJobs {
		t.Fatalf("all %d restarts were done before the kill: the machine is too slow for this burst", n)
	}
	survivor := p.waitTakeover(t)
	leaseTakeover := time.Since(killedAt)
	if err := <-crashErr; err != nil {
		t.Fatal(err)
	}
	if err := testkit.Poll(200*time.Millisecond, longTimeout, func(ctx context.Context) (bool, error) {
		n, err := restarted(ctx, ns, sets)
		return n == burstJobs, err
	}); err != nil {
		n, _ := restarted(ctx, ns, sets)
		t.Fatalf("%d of %d sets restarted: %v", n, burstJobs, err)
	}
	// Every crashed pod gone, every restart through (its marker done).
	for i, name := range podNames {
		if err := testkit.Poll(100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
			rec, err := cluster.Record(ctx, env.Client, ns, api.KindPodCliqueSet, sets[i])
			if err != nil || rec == nil {
				return false, err
			}
			done := slices.ContainsFunc(rec.Status.Cliques, func(c shepherdv1alpha1.CliqueRecord) bool {
				return c.Name == sets[i]+"-0-w" && c.Restart != nil && c.Restart.Done
			})
			err = env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
			return err != nil && done, client.IgnoreNotFound(err)
		}); err != nil {
			t.Errorf("set %s: pod %s not deleted or its restart not done: %v", sets[i], name, err)
		}
	}
	cluster.CheckEvents(t, p.pl.Client, ns, api.KindPodCliqueSet, api.EventReplicaRestarting, sets, eventsWithin)

	deletes := p.pl.audited(t, ns, "delete", "pods", "")
	deleteBy, deleteFailed := writesBy(t, "the restart's pod delete", deletes, podNames)
	var first time.Time
	for _, e := range deletes {
		if e.OK() && e.User.Username == p.standbyUser && (first.IsZero() || e.StageTimestamp.Before(first)) {
			first = e.StageTimestamp
		}
	}
	p.report(t, "restart pod deletes", deleteBy, first.Sub(killedAt))
	// A stale repeat may only find the pod gone (404 or the UID
	// precondition's 409); nothing else may be refused.
	for pod, codes := range deleteFailed {
		for _, c := range codes {
			if c != 404 && c != 409 {
				t.Errorf("a delete of pod %s was refused with HTTP %d", pod, c)
			}
		}
	}
	recordBy, recordFailed := byUserOf(append(p.pl.audited(t, ns, "patch", "workloadrecords", ""), p.pl.audited(t, ns, "create", "workloadrecords", "")...))
	for _, r := range []string{"podcliquesets", "podcliques"} {
		ok, refused := byUserOf(p.pl.audited(t, ns, "patch", r, ""))
		for _, u := range []string{p.leaderUser, p.standbyUser} {
			if ok[u]+refused[u] > 0 {
				t.Errorf("%s patched %d times by shepherd (%s): its Training state belongs in its records", r, ok[u]+refused[u], u)
			}
		}
	}
	t.Logf("Lease taken over %v after the kill; WorkloadRecord writes %v (refused %v); refused pod deletes %v",
		leaseTakeover.Round(10*time.Millisecond), recordBy, recordFailed, deleteFailed)
	p.checkHolder(t, survivor)
}

// byUserOf counts successful and refused writes per user.
func byUserOf(evs []auditEvent) (ok, refused map[string]int) {
	ok, refused = map[string]int{}, map[string]int{}
	for _, e := range evs {
		if e.OK() {
			ok[e.User.Username]++
		} else {
			refused[e.User.Username]++
		}
	}
	return ok, refused
}

// TestFailoverMidGangTerminations: 30 Inference PodCliqueSets with a 2 s
// terminationDelay whose only pod turns NotReady one a second; the leader
// is SIGKILLed after 8 gang terminations; the standby takes over and
// terminates the rest. Every set's PodClique is deleted by exactly one
// successful delete, with exactly one GangTerminated Event.
func TestFailoverMidGangTerminations(t *testing.T) {
	p := startPair(t, seed)
	ns := env.Namespace(t)
	ctx := context.Background()
	delay := 2 * time.Second

	sets := make([]string, burstJobs)
	cliques := make([]string, burstJobs)
	pods := make([]*corev1.Pod, burstJobs)
	for i := range sets {
		sets[i] = fmt.Sprintf("serve-%02d", i)
		cliques[i] = sets[i] + "-0-w"
		pods[i] = groveSet(t, ns, sets[i], &delay)
	}
	if err := testkit.Poll(200*time.Millisecond, longTimeout, func(ctx context.Context) (bool, error) {
		var l shepherdv1alpha1.WorkloadRecordList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		n := 0
		for _, r := range l.Items {
			for _, c := range r.Status.Cliques {
				if c.WasAvailable {
					n++
				}
			}
		}
		return n == burstJobs, nil
	}); err != nil {
		t.Fatalf("the PodCliques never all became available: %v", err)
	}
	remaining := func(ctx context.Context) (int, error) {
		l, err := grove.ListCliques(ctx, env.Client, client.InNamespace(ns))
		if err != nil {
			return 0, err
		}
		n := 0
		for _, c := range l {
			if c.DeletionTimestamp == nil {
				n++
			}
		}
		return n, nil
	}

	// The kubelet's part: one pod turns NotReady every second.
	start := time.Now()
	lossErr := make(chan error, 1)
	go func() {
		defer close(lossErr)
		for i, pod := range pods {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
			orig := pod.DeepCopy()
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
			if err := env.Client.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
				lossErr <- fmt.Errorf("making %s NotReady: %w", pod.Name, err)
				return
			}
		}
	}()

	if err := testkit.Poll(100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		n, err := remaining(ctx)
		return burstJobs-n >= enforcedBeforeKill, err
	}); err != nil {
		t.Fatalf("gang terminations by the leader before the kill: %v", err)
	}
	if got, _, err := cluster.LeaseHolder(ctx, p.pl.Client, p.leaseNS, leaseName); err != nil || got != p.leaderID {
		t.Fatalf("before the kill the Lease holder is %q (err %v), want the first replica %q", got, err, p.leaderID)
	}
	p.leader.Kill()
	killedAt := time.Now()
	if n, _ := remaining(ctx); n == 0 {
		t.Fatal("every gang was terminated before the kill: the machine is too slow for this burst")
	}
	survivor := p.waitTakeover(t)
	leaseTakeover := time.Since(killedAt)
	if err := <-lossErr; err != nil {
		t.Fatal(err)
	}
	if err := testkit.Poll(200*time.Millisecond, longTimeout, func(ctx context.Context) (bool, error) {
		n, err := remaining(ctx)
		return n == 0, err
	}); err != nil {
		n, _ := remaining(ctx)
		t.Fatalf("%d of %d PodCliques left: %v", n, burstJobs, err)
	}
	cluster.CheckEvents(t, p.pl.Client, ns, api.KindPodCliqueSet, api.EventGangTerminated, sets, eventsWithin)

	deletes := p.pl.audited(t, ns, "delete", "podcliques", "")
	deleteBy, deleteFailed := writesBy(t, "the gang termination's PodClique delete", deletes, cliques)
	var first time.Time
	for _, e := range deletes {
		if e.OK() && e.User.Username == p.standbyUser && (first.IsZero() || e.StageTimestamp.Before(first)) {
			first = e.StageTimestamp
		}
	}
	p.report(t, "gang terminations", deleteBy, first.Sub(killedAt))
	for c, codes := range deleteFailed {
		for _, code := range codes {
			if code != 404 && code != 409 {
				t.Errorf("a delete of PodClique %s was refused with HTTP %d", c, code)
			}
		}
	}
	t.Logf("Lease taken over %v after the kill; refused PodClique deletes %v", leaseTakeover.Round(10*time.Millisecond), deleteFailed)
	p.checkHolder(t, survivor)
}
