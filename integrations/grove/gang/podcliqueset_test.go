package gang

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

func TestExpiredGangs(t *testing.T) {
	ok := breachedCond(metav1.ConditionFalse, t0.Add(-time.Hour))
	at := func(ago time.Duration) metav1.Condition { return breachedCond(metav1.ConditionTrue, t0.Add(-ago)) }
	never := metav1.Condition{Type: "MinAvailableBreached", Status: metav1.ConditionFalse, Reason: "NeverAvailable", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}
	unknown := metav1.Condition{Type: "MinAvailableBreached", Status: metav1.ConditionUnknown, Reason: "UpdateInProgress", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}
	tests := []struct {
		name       string
		delay      *time.Duration
		groupDelay *time.Duration
		// groupCarrier is the scaling groups' override carrier, as on
		// Grove's schema.
		groupCarrier  string
		cliques       []grovev1alpha1.PodClique
		groups        []grove.ScalingGroup
		wantTerminate []int32
		wantGroupKill []int32
		wantRequeue   time.Duration
	}{
		{name: "healthy", delay: ptr.To(10 * time.Second),
			cliques: []grovev1alpha1.PodClique{clique("a", 0, "", 0, ok), clique("b", 1, "", 0, ok)}},
		{name: "standalone breached past its delay: terminate that replica", delay: ptr.To(10 * time.Second),
			cliques:       []grovev1alpha1.PodClique{clique("a", 0, "", 0, ok), clique("b", 1, "", 0, at(11*time.Second))},
			wantTerminate: []int32{1}},
		{name: "exactly at the delay: terminate", delay: ptr.To(10 * time.Second),
			cliques:       []grovev1alpha1.PodClique{clique("a", 0, "", 0, at(10*time.Second))},
			wantTerminate: []int32{0}},
		{name: "not yet: requeue for the remainder", delay: ptr.To(10 * time.Second),
			cliques:     []grovev1alpha1.PodClique{clique("a", 0, "", 0, at(3*time.Second))},
			wantRequeue: 7 * time.Second},
		{name: "several breaches: shortest wait", delay: ptr.To(10 * time.Second),
			cliques: []grovev1alpha1.PodClique{
				clique("a", 0, "", 0, at(3*time.Second)), clique("b", 1, "", 0, at(8*time.Second)), clique("c", 2, "", 0, at(1*time.Second))},
			wantRequeue: 2 * time.Second},
		{name: "never available and rolling update are no breach", delay: ptr.To(time.Second),
			cliques: []grovev1alpha1.PodClique{clique("a", 0, "", 0, never), clique("b", 0, "", 0, unknown)}},
		{name: "terminationDelay nil: nothing", delay: nil,
			cliques: []grovev1alpha1.PodClique{clique("a", 0, "", 0, at(time.Hour))}},
		{name: "breached PCSG past its delay terminates the replica", delay: ptr.To(10 * time.Second),
			cliques: []grovev1alpha1.PodClique{clique("s", 0, "", 0, ok),
				clique("w0", 0, "pcs-0-g", 0, at(20*time.Second)), clique("w1", 0, "pcs-0-g", 1, at(15*time.Second))},
			groups:        []grove.ScalingGroup{group("pcs-0-g", 0, 2, 1)},
			wantTerminate: []int32{0}},
		{name: "PCSG still above minAvailable: only its breached replica goes", delay: ptr.To(10 * time.Second),
			cliques: []grovev1alpha1.PodClique{
				clique("w0", 0, "pcs-0-g", 0, at(20*time.Second)), clique("w1", 0, "pcs-0-g", 1, ok)},
			groups:        []grove.ScalingGroup{group("pcs-0-g", 0, 2, 1)},
			wantGroupKill: []int32{0}},
		{name: "PCSG override shorter than the PodCliqueSet delay is honoured", delay: ptr.To(time.Hour), groupDelay: ptr.To(2 * time.Second),
			cliques: []grovev1alpha1.PodClique{
				clique("w0", 0, "pcs-0-g", 0, at(3*time.Second)), clique("w1", 0, "pcs-0-g", 1, at(3*time.Second))},
			groups:        []grove.ScalingGroup{group("pcs-0-g", 0, 2, 1)},
			wantTerminate: []int32{0}},
		{name: "PCSG override by its carrier is honoured", delay: ptr.To(time.Hour), groupCarrier: "g=2s",
			cliques: []grovev1alpha1.PodClique{
				clique("w0", 0, "pcs-0-g", 0, at(3*time.Second)), clique("w1", 0, "pcs-0-g", 1, at(3*time.Second))},
			groups:        []grove.ScalingGroup{group("pcs-0-g", 0, 2, 1)},
			wantTerminate: []int32{0}},
		{name: "PCSG delay counts from the breach that took it below minAvailable", delay: ptr.To(10 * time.Second),
			cliques: []grovev1alpha1.PodClique{
				clique("w0", 0, "pcs-0-g", 0, at(time.Hour)), clique("w1", 0, "pcs-0-g", 1, at(4*time.Second))},
			groups:      []grove.ScalingGroup{group("pcs-0-g", 0, 2, 1)},
			wantRequeue: 6 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs"}}
			if tc.delay != nil {
				pcs.Spec.Template.TerminationDelay = &metav1.Duration{Duration: *tc.delay}
			}
			if tc.groupCarrier != "" {
				pcs.Annotations = map[string]string{api.AnnotationTerminationDelay: tc.groupCarrier}
				pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "g"}}
			}
			if tc.groupDelay != nil {
				pcs.Spec.Template.PodCliqueScalingGroupConfigs = []grovev1alpha1.PodCliqueScalingGroupConfig{{Name: "g"}}
			}
			set := grove.SetOf(pcs)
			if tc.groupDelay != nil {
				seedConfigDelay(t, set, "g", *tc.groupDelay)
			}
			setKill, groupKill, requeue := gangs(set, grove.CliquesOf(tc.cliques...), tc.groups)
			if !slices.Equal(setKill, tc.wantTerminate) || !slices.Equal(groupKill, tc.wantGroupKill) {
				t.Errorf("terminate replicas %v, group replicas %v; want %v, %v", setKill, groupKill, tc.wantTerminate, tc.wantGroupKill)
			}
			if requeue != tc.wantRequeue {
				t.Errorf("requeueAfter = %v, want %v", requeue, tc.wantRequeue)
			}
		})
	}
}

func TestMinRequeue(t *testing.T) {
	var m MinRequeue
	if m != 0 {
		t.Fatal("zero value must mean no requeue")
	}
	m.Add(5 * time.Second)
	m.Add(3 * time.Second)
	m.Add(4 * time.Second)
	if time.Duration(m) != 3*time.Second {
		t.Errorf("min = %v, want 3s", time.Duration(m))
	}
	m.Add(-time.Second)
	if time.Duration(m) != time.Second {
		t.Errorf("non-positive wait = %v, want 1s", time.Duration(m))
	}
}
