package bed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/grovemodel"
)

// inferenceSetObject is an Inference PodCliqueSet for the Grove model: one
// replica; a clique "w" of one pod, standalone or (group true) in a scaling
// group "sg" of two replicas with minAvailable 1; every pod pinned to node.
func inferenceSetObject(ns, name, node string, delay time.Duration, group bool, annotations map[string]string) *unstructured.Unstructured {
	template := map[string]any{
		"terminationDelay": delay.String(),
		"cliques": []any{map[string]any{"name": "w", "spec": map[string]any{"roleName": "w", "replicas": int64(1), "podSpec": map[string]any{
			"nodeSelector": map[string]any{"kubernetes.io/hostname": node},
			"containers":   []any{map[string]any{"name": "w", "image": "docker.io/serve"}},
		}}}},
	}
	if group {
		template["podCliqueScalingGroups"] = []any{map[string]any{"name": "sg", "cliqueNames": []any{"w"}, "replicas": int64(2), "minAvailable": int64(1)}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(1), "template": template}}}
	u.SetGroupVersionKind(pcsGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(annotations)
	return u
}

// breakGang loses the only pod of PodClique clique for good: its node is
// cordoned, so the pod Grove makes again stays Pending and the clique,
// once available, stays below minAvailable.
func breakGang(t *testing.T, ns, set, clique, node string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{}
	n.Name = node
	if err := kit.Cluster.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`))); err != nil {
		t.Fatal(err)
	}
	for _, p := range setPods(t, ns, set) {
		if p.Labels[api.LabelPodClique] == clique {
			if err := kit.Cluster.Client.Delete(ctx, &p); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("PodClique %s has no pod", clique)
}

// cliqueUID is a PodClique's UID, "" when it does not exist.
func cliqueUID(t *testing.T, ns, name string) types.UID {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(pclqGVK)
	if err := kit.Cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return ""
	}
	return u.GetUID()
}

// gangDeletions counts, from the audit log, the PodClique deletions in ns
// (a delete of one, or a deletecollection) by each user, and how many
// times each PodClique was created.
func gangDeletions(t *testing.T, ns string) (deletes map[string]int, creates map[string]int) {
	t.Helper()
	ws, err := kit.Bed.Writes("podcliques", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	deletes, creates = map[string]int{}, map[string]int{}
	for _, w := range ws {
		switch {
		case !w.OK() || w.ObjectRef.Subresource != "":
		case w.Verb == "delete" || w.Verb == "deletecollection":
			deletes[w.User.Username]++
		case w.Verb == "create":
			creates[w.ObjectRef.Name]++
		}
	}
	return deletes, creates
}

// TestGangTerminatedByExactlyOneActor (issue 30, item 4): beside Grove (its
// behaviour model at grovemodel.Commit), a breached gang is deleted once,
// by one actor, and shepherd writes no condition on Grove's objects:
//   - auto: the set's record says Grove enforces; Grove's deletecollection
//     is the only deletion, shepherd's none;
//   - on, a standalone clique: Grove's delay (the same terminationDelay)
//     ends no later than shepherd's, so shepherd leaves the gang to Grove:
//     again Grove's deletion only;
//   - on, a scaling-group replica whose override (shepherd.dev/termination-delay)
//     is far shorter than the set's hour: shepherd terminates it, once,
//     and Grove, whose delay is the set's, deletes nothing.
//
// In each, the broken PodClique is created exactly twice: the gang was
// replaced once, and what replaced it was not deleted again.
func TestGangTerminatedByExactlyOneActor(t *testing.T) {
	const delay = 4 * time.Second
	scenarios := []struct {
		name, mode string
		group      bool
		set        time.Duration
		knobs      map[string]string
		// clique is the PodClique whose pod is lost for good.
		clique string
		actor  string
	}{
		{name: "auto", mode: "auto", set: delay, clique: "-0-w", actor: grovemodel.User},
		{name: "on, same delay: left to Grove", mode: "on", set: delay, clique: "-0-w", actor: grovemodel.User},
		{name: "on, shorter scaling-group override: shepherd", mode: "on", group: true, set: time.Hour,
			knobs: map[string]string{api.AnnotationTerminationDelay: "sg=" + delay.String()}, clique: "-0-sg-1-w", actor: shepherdUser},
	}
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := kit.Cluster.Namespace(t)
			node := kit.Bed.AddNodes(t, fmt.Sprintf("gang%d", i), bed.Nodes{Count: 1})[0]
			kit.DeleteWorkloads(t, ns)
			if sc.mode != "auto" {
				kit.ServeWith(t, "--feature=gang-termination="+sc.mode)
			}
			name := "serve"
			pods := 1
			if sc.group {
				pods = 2
			}
			if err := kit.Cluster.Client.Create(ctx, inferenceSetObject(ns, name, node, sc.set, sc.group, sc.knobs)); err != nil {
				t.Fatalf("creating PodCliqueSet: %v", err)
			}
			created := time.Now()
			runningReady(t, ns, name, pods)
			clique := name + sc.clique
			// Grove's model writes MinAvailableBreached=False once the
			// pods run; the record says who terminates.
			wantBy := shepherdv1alpha1.EnforcerGrove
			if sc.mode == "on" {
				wantBy = shepherdv1alpha1.EnforcerShepherd
			}
			waitRecord(t, time.Minute, ns, api.KindPodCliqueSet, name, "gang termination by "+string(wantBy), func(r *shepherdv1alpha1.WorkloadRecord) bool {
				gt := r.Status.GangTermination
				if gt == nil || gt.EnforcedBy != wantBy {
					return false
				}
				if wantBy == shepherdv1alpha1.EnforcerGrove {
					return len(r.Status.Cliques) == 0
				}
				for _, c := range r.Status.Cliques {
					if c.Name == clique && c.WasAvailable {
						return true
					}
				}
				return false
			})

			// Grove terminates only a gang that was ever scheduled: one
			// that lost its pods within InitialScheduleGrace of its
			// creation counts as never scheduled (WasPCLQEverScheduled).
			time.Sleep(time.Until(created.Add(grovemodel.InitialScheduleGrace + 2*time.Second)))
			before := cliqueUID(t, ns, clique)
			breakGang(t, ns, name, clique, node)
			brokenAt := time.Now()
			kit.Eventually(t, delay+grovemodel.DefaultRetryInterval+30*time.Second, "the broken gang replaced", func() (bool, string) {
				uid := cliqueUID(t, ns, clique)
				return uid != "" && uid != before, fmt.Sprintf("PodClique %s uid %q (was %q)", clique, uid, before)
			})
			t.Logf("gang replaced %s after the pod was lost (terminationDelay %s)", time.Since(brokenAt).Round(100*time.Millisecond), delay)
			// Long enough for a second actor to act too: Grove's retry, and
			// shepherd's margin before it would step in for Grove.
			time.Sleep(delay + grovemodel.DefaultRetryInterval + time.Second)

			deletes, creates := gangDeletions(t, ns)
			t.Logf("PodClique deletions by user %v; creates per PodClique %v", deletes, creates)
			if deletes[sc.actor] == 0 {
				t.Errorf("%s did not delete the gang", sc.actor)
			}
			for user, n := range deletes {
				if user != sc.actor {
					t.Errorf("%s deleted PodCliques %d times too; want only %s", user, n, sc.actor)
				}
			}
			if creates[clique] != 2 {
				t.Errorf("PodClique %s created %d times, want 2 (the gang replaced exactly once)", clique, creates[clique])
			}
			recs, err := kit.Bed.Writes("workloadrecords", ns, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("shepherd's writes: %d to the set's WorkloadRecord, none to PodCliques or scaling groups but its deletions", len(bed.By(recs, shepherdUser)))
			for _, res := range []string{"podcliques", "podcliquescalinggroups"} {
				ws, err := kit.Bed.Writes(res, ns, "")
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range bed.By(ws, shepherdUser) {
					if w.Verb != "delete" {
						t.Errorf("shepherd wrote %s %s (%s %s): it writes nothing on Grove's objects", res, w.ObjectRef.Name, w.Verb, w.ObjectRef.Subresource)
					}
				}
				// Its controllers read Grove's objects as served, from the
				// informer cache (serve.ClientOptions), never one GET at a time.
				gets, err := kit.Bed.Gets(res, ns, "")
				if err != nil {
					t.Fatal(err)
				}
				if mine := bed.By(gets, shepherdUser); len(mine) > 0 {
					t.Errorf("shepherd read %s from the apiserver %d times, want 0 (its cache answers):\n%s", res, len(mine), bed.Lines(mine))
				}
			}
		})
	}
}
