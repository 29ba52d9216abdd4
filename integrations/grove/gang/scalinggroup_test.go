package gang

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

func group(name string, pcsIdx int, replicas, minAvailable int32) grove.ScalingGroup {
	return grove.GroupOf(&grovev1alpha1.PodCliqueScalingGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelPartOf: "pcs", api.LabelPodCliqueSetReplicaIndex: itoa(pcsIdx)}},
		Spec:       grovev1alpha1.PodCliqueScalingGroupSpec{Replicas: replicas, MinAvailable: ptr.To(minAvailable)},
	})
}

// seedConfigDelay gives the scaling-group config name of s the seed field
// terminationDelay d, on s as served.
func seedConfigDelay(t *testing.T, s *grove.Set, name string, d time.Duration) {
	t.Helper()
	cfgs, _, _ := unstructured.NestedSlice(s.Served.Object, "spec", "template", "podCliqueScalingGroups")
	for _, c := range cfgs {
		if m := c.(map[string]any); m["name"] == name {
			m["terminationDelay"] = d.String()
			setServed(t, s.Served, cfgs, "spec", "template", "podCliqueScalingGroups")
			return
		}
	}
	t.Fatalf("no scaling-group config %q", name)
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestGroupGangs(t *testing.T) {
	delay := 10 * time.Second
	ok := breachedCond(metav1.ConditionFalse, t0.Add(-time.Hour))
	at := func(ago time.Duration) metav1.Condition { return breachedCond(metav1.ConditionTrue, t0.Add(-ago)) }
	tests := []struct {
		name         string
		replicas     int32
		minAvailable int32
		delay        *time.Duration
		cliques      []grovev1alpha1.PodClique

		wantAvailable int32
		wantBreached  metav1.ConditionStatus
		wantTerminate []int32
		wantRequeue   time.Duration
	}{
		{name: "healthy", replicas: 2, minAvailable: 1, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, ok), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 2, wantBreached: metav1.ConditionFalse},
		{name: "one replica breached, delay not yet passed: requeue for the rest", replicas: 2, minAvailable: 1, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(4*time.Second)), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionFalse, wantRequeue: 6 * time.Second},
		{name: "exactly at the delay: terminate", replicas: 2, minAvailable: 1, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(delay)), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionFalse, wantTerminate: []int32{0}},
		{name: "any breached clique breaches its replica", replicas: 3, minAvailable: 1, delay: &delay,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, ok), clique("b0", 0, "g", 0, ok),
				clique("a1", 0, "g", 1, ok), clique("b1", 0, "g", 1, at(time.Minute)),
				clique("a2", 0, "g", 2, ok), clique("b2", 0, "g", 2, ok)},
			wantAvailable: 2, wantBreached: metav1.ConditionFalse, wantTerminate: []int32{1}},
		{name: "several breaches: shortest wait", replicas: 4, minAvailable: 1, delay: &delay,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, at(2*time.Second)), clique("a1", 0, "g", 1, at(7*time.Second)),
				clique("a2", 0, "g", 2, at(time.Minute)), clique("a3", 0, "g", 3, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionFalse, wantTerminate: []int32{2}, wantRequeue: 3 * time.Second},
		{name: "below minAvailable: breached, leave it to the PodCliqueSet", replicas: 2, minAvailable: 1, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(time.Minute)), clique("a1", 0, "g", 1, at(time.Minute))},
			wantAvailable: 0, wantBreached: metav1.ConditionTrue},
		{name: "minAvailable = replicas: one breach is a group breach", replicas: 2, minAvailable: 2, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(time.Minute)), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionTrue},
		{name: "terminationDelay nil: nothing terminated", replicas: 2, minAvailable: 1,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(time.Hour)), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionFalse},
		// Issue 30: a group without PodCliques was reported "2 of 2
		// replicas available".
		{name: "no PodCliques yet: none available, not breached", replicas: 2, minAvailable: 1, delay: &delay,
			wantAvailable: 0, wantBreached: metav1.ConditionFalse},
		{name: "one replica not created yet: not available, and no group breach", replicas: 3, minAvailable: 2, delay: &delay,
			cliques:       []grovev1alpha1.PodClique{clique("a0", 0, "g", 0, at(time.Minute)), clique("a1", 0, "g", 1, ok)},
			wantAvailable: 1, wantBreached: metav1.ConditionFalse, wantTerminate: []int32{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := group("g", 0, tc.replicas, tc.minAvailable)
			cliques := grove.CliquesOf(tc.cliques...)
			agg := AggregateGroup(&g, cliques, breachesOf(cliques))
			if agg.Available() != tc.wantAvailable {
				t.Errorf("available replicas = %d, want %d", agg.Available(), tc.wantAvailable)
			}
			if agg.Below != (tc.wantBreached == metav1.ConditionTrue) {
				t.Errorf("below minAvailable = %v, want %v", agg.Below, tc.wantBreached == metav1.ConditionTrue)
			}
			_, kill, requeue := gangs(grove.SetOf(setWithDelay(tc.delay)), cliques, []grove.ScalingGroup{g})
			if !slices.Equal(kill, tc.wantTerminate) {
				t.Errorf("terminate = %v, want %v", kill, tc.wantTerminate)
			}
			// A group below minAvailable is a breach of its PodCliqueSet
			// replica: its wait is the set level's.
			if !agg.Below && requeue != tc.wantRequeue {
				t.Errorf("requeueAfter = %v, want %v", requeue, tc.wantRequeue)
			}
		})
	}
}

func TestAggregateGroupSince(t *testing.T) {
	// Three replicas, minAvailable 2: the group drops below at the second
	// breach, whatever order the cliques come in.
	g := group("g", 0, 3, 2)
	cl := grove.CliquesOf(
		clique("c2", 0, "g", 2, breachedCond(metav1.ConditionTrue, t0.Add(-1*time.Minute))),
		clique("c0", 0, "g", 0, breachedCond(metav1.ConditionTrue, t0.Add(-5*time.Minute))),
		clique("d0", 0, "g", 0, breachedCond(metav1.ConditionTrue, t0.Add(-9*time.Minute))),
		clique("c1", 0, "g", 1, breachedCond(metav1.ConditionFalse, t0)),
	)
	agg := AggregateGroup(&g, cl, breachesOf(cl))
	if !agg.Below || !agg.Since.Equal(t0.Add(-1*time.Minute)) {
		t.Fatalf("below=%v since=%v; want true since %v", agg.Below, agg.Since, t0.Add(-time.Minute))
	}
	if agg.Breached[0].Index != 0 || !agg.Breached[0].Since.Equal(t0.Add(-9*time.Minute)) {
		t.Errorf("replica 0 breached since its earliest clique breach, got %+v", agg.Breached[0])
	}
}

func TestGroupDelay(t *testing.T) {
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	tests := []struct {
		name       string
		setDelay   *metav1.Duration
		config     *metav1.Duration // the seed config entry's field
		carrier    string           // the PodCliqueSet's carrier
		groupField *metav1.Duration // the seed PCSG's own field
		want       *time.Duration
		wantErr    bool
	}{
		{name: "no PodCliqueSet delay: off", config: d(time.Minute), carrier: "workers=1s"},
		{name: "no override: the set's", setDelay: d(time.Hour), want: ptr.To(time.Hour)},
		{name: "seed config field", setDelay: d(time.Hour), config: d(time.Minute), want: ptr.To(time.Minute)},
		{name: "Grove's schema: the carrier", setDelay: d(time.Hour), carrier: "other=5s, workers=2s", want: ptr.To(2 * time.Second)},
		{name: "carrier of another group only", setDelay: d(time.Hour), carrier: "other=5s", want: ptr.To(time.Hour)},
		{name: "field wins over carrier", setDelay: d(time.Hour), config: d(time.Minute), carrier: "workers=2s", want: ptr.To(time.Minute)},
		{name: "the PCSG's own seed field wins", setDelay: d(time.Hour), config: d(time.Minute), groupField: d(time.Second), want: ptr.To(time.Second)},
		{name: "bad carrier: error, with the set's delay", setDelay: d(time.Hour), carrier: "workers=soon", want: ptr.To(time.Hour), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs"}}
			pcs.Spec.Template.TerminationDelay = tc.setDelay
			pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "workers"}}
			if tc.carrier != "" {
				pcs.Annotations = map[string]string{api.AnnotationTerminationDelay: tc.carrier}
			}
			set := grove.SetOf(pcs)
			if tc.config != nil {
				seedConfigDelay(t, set, "workers", tc.config.Duration)
			}
			g := group("pcs-0-workers", 0, 2, 1)
			if tc.groupField != nil {
				setServed(t, g.Served, tc.groupField.Duration.String(), "spec", "terminationDelay")
			}
			got, err := GroupDelay(set, &g)
			if (err != nil) != tc.wantErr {
				t.Errorf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delay (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGroupConfigName(t *testing.T) {
	pcs := grove.SetOf(&grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "inf"}})
	for name, want := range map[string]string{"inf-1-workers": "workers", "inf-1-sg-a": "sg-a", "other-1-workers": "", "inf-0-workers": ""} {
		g := group(name, 1, 1, 1)
		if got := GroupConfigName(pcs, &g); got != want {
			t.Errorf("GroupConfigName(%s) = %q, want %q", name, got, want)
		}
	}
}
