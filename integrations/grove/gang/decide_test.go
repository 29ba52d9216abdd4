package gang

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// podsOf gives c pods in the given states, owned by c's incarnation.
func podsOf(c *grovev1alpha1.PodClique, states ...podState) []corev1.Pod {
	pods := mkPods(states...)
	for i := range pods {
		pods[i].Name = c.Name + "-" + pods[i].Name
		pods[i].UID = c.UID + "-" + pods[i].UID
		pods[i].OwnerReferences = []metav1.OwnerReference{{APIVersion: "grove.io/v1alpha1", Kind: api.KindPodClique, Name: c.Name, UID: c.UID}}
	}
	return pods
}

// groveOwned makes c's conditions Grove's (its field manager owns the
// atomic list), with MinAvailableBreached True since the given time.
func groveOwned(c grovev1alpha1.PodClique, since time.Time) grovev1alpha1.PodClique {
	c.Status.Conditions = []metav1.Condition{breachedCond(metav1.ConditionTrue, since)}
	c.ManagedFields = []metav1.ManagedFieldsEntry{managed("grove-operator", atomicConds)}
	return c
}

// The record is the state: wasAvailable and the breach start live in the
// set's WorkloadRecord, one write per decision, the record before any
// deletion; under on beside Grove, exactly one actor terminates a gang.
func TestDecide(t *testing.T) {
	delay := 10 * time.Second
	at := func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }
	plain := unavailable(clique("a", 0, "", 0)) // nothing kept on the PodClique
	entry := func(was bool, since *metav1.Time) []shepherdv1alpha1.CliqueRecord {
		return []shepherdv1alpha1.CliqueRecord{{Name: "a", UID: plain.UID, WasAvailable: was, BreachedSince: since}}
	}
	me := &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd,
		Message: "no field manager but shepherd's writes MinAvailableBreached on this set's PodCliques"}
	onMsg := `MinAvailableBreached of PodClique /a is written by field manager "grove-operator"; shepherd enforces too (setting on) and leaves to Grove each gang Grove would terminate no later`
	recorded := func(cliques []shepherdv1alpha1.CliqueRecord, gt *shepherdv1alpha1.GangTermination) *shepherdv1alpha1.WorkloadRecordStatus {
		return &shepherdv1alpha1.WorkloadRecordStatus{Cliques: cliques, GangTermination: gt}
	}
	type out struct {
		Write       Write
		Status      *shepherdv1alpha1.WorkloadRecordStatus
		Terminate   []int32
		LeftToGrove int
		Requeue     time.Duration
	}
	tests := []struct {
		name     string
		mode     integrations.Mode
		training bool
		clique   grovev1alpha1.PodClique
		pods     []podState
		record   *shepherdv1alpha1.WorkloadRecordStatus
		want     out
	}{
		{name: "a new set: its record, wasAvailable once available", clique: plain, pods: []podState{ready, ready},
			want: out{Write: WriteRecord, Status: recorded(entry(true, nil), me)}},
		{name: "nothing changed: nothing written", clique: plain, pods: []podState{ready, ready}, record: recorded(entry(true, nil), me),
			want: out{}},
		{name: "lost a pod: the breach starts, in the record", clique: plain, pods: []podState{ready}, record: recorded(entry(true, nil), me),
			want: out{Write: WriteRecord, Status: recorded(entry(true, at(0)), me)}},
		{name: "breached within the delay: wait for the rest", clique: plain, pods: []podState{ready}, record: recorded(entry(true, at(-4*time.Second)), me),
			want: out{Requeue: 6 * time.Second}},
		{name: "breached past the delay: terminate the replica", clique: plain, pods: []podState{ready}, record: recorded(entry(true, at(-delay)), me),
			want: out{Write: WriteTerminate, Terminate: []int32{0}}},
		{name: "an entry of another incarnation is stale", clique: plain, pods: []podState{ready},
			record: recorded([]shepherdv1alpha1.CliqueRecord{{Name: "a", UID: "old", WasAvailable: true, BreachedSince: at(-time.Hour)}}, me),
			want:   out{Write: WriteRecord, Status: recorded(entry(false, nil), me)}},
		{name: "upgrade: wasAvailable and the breach an earlier shepherd kept on the PodClique", clique: clique("a", 0, "", 0, breachedCond(metav1.ConditionTrue, t0.Add(-time.Minute))),
			pods: []podState{ready}, want: out{Write: WriteRecord, Status: recorded(entry(true, at(-time.Minute)), me)}},
		{name: "Training: package training's", training: true, clique: plain, pods: []podState{ready}, record: recorded(entry(true, at(-time.Hour)), me),
			want: out{}},
		{name: "auto beside Grove: Grove's, nothing derived", clique: groveOwned(plain, t0.Add(-time.Hour)), pods: []podState{ready}, record: recorded(entry(true, at(-time.Hour)), me),
			want: out{Write: WriteRecord, Status: recorded(nil, &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerGrove,
				Message: `MinAvailableBreached of PodClique /a is written by field manager "grove-operator"; Grove gang-terminates this set itself (setting auto)`})}},
		{name: "on beside Grove, Grove's delay ends no later: left to Grove for its grace", mode: integrations.ModeOn,
			clique: groveOwned(plain, t0.Add(-11*time.Second)), pods: []podState{ready},
			record: recorded(entry(true, at(-11*time.Second)), &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd, Message: onMsg}),
			want:   out{LeftToGrove: 1, Requeue: groveGrace - time.Second}},
		{name: "on beside Grove, Grove's delay ends within the margin: left to Grove", mode: integrations.ModeOn,
			clique: groveOwned(plain, t0.Add(-7*time.Second)), pods: []podState{ready},
			record: recorded(entry(true, at(-11*time.Second)), &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd, Message: onMsg}),
			want:   out{LeftToGrove: 1, Requeue: groveGrace + 3*time.Second}},
		{name: "on beside Grove, the gang outlived Grove's grace: shepherd terminates", mode: integrations.ModeOn,
			clique: groveOwned(plain, t0.Add(-delay-groveGrace)), pods: []podState{ready},
			record: recorded(entry(true, at(-delay-groveGrace)), &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd, Message: onMsg}),
			want:   out{Write: WriteTerminate, Terminate: []int32{0}}},
		{name: "on beside Grove, shepherd's delay ends well before Grove's: shepherd terminates", mode: integrations.ModeOn,
			clique: groveOwned(plain, t0.Add(-4*time.Second)), pods: []podState{ready},
			record: recorded(entry(true, at(-delay)), &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd, Message: onMsg}),
			want:   out{Write: WriteTerminate, Terminate: []int32{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := setWithDelay(&delay)
			if tc.training {
				pcs.Annotations = map[string]string{api.AnnotationWorkloadType: grove.WorkloadTypeTraining}
			}
			mode := tc.mode
			if mode == "" {
				mode = integrations.ModeAuto
			}
			c := tc.clique
			if len(c.Status.Conditions) == 0 {
				c = unavailable(c) // wasAvailable is kept on the PodClique only beside its breach
			}
			d := Decide(SetInput{Set: grove.SetOf(pcs), Cliques: grove.CliquesOf(c), Pods: podsOf(&c, tc.pods...), Record: tc.record, Mode: mode}, t0)
			got := out{Write: d.Write, LeftToGrove: len(d.LeftToGrove), Requeue: d.RequeueAfter}
			if d.Write == WriteRecord {
				got.Status = &d.Status
			}
			for _, term := range d.Terminate {
				got.Terminate = append(got.Terminate, term.Replica)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}
