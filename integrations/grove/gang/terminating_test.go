package gang

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// deleting marks a PodClique as being deleted.
func deleting(c grovev1alpha1.PodClique) grovev1alpha1.PodClique {
	c.DeletionTimestamp = &metav1.Time{Time: t0.Add(-time.Second)}
	c.Finalizers = []string{"test/drain"}
	return c
}

// TestTerminatingPodCliquesBothLevelsAgree: the PodCliqueScalingGroup level
// (AggregateGroup) and the PodCliqueSet level (expiredGangs) judge a PodClique
// being deleted by one rule (Terminating): its stale MinAvailableBreached
// neither terminates anything again nor escalates, and its replica is not
// healthy. Before, the PCSG level counted the stale breach (and
// re-terminated the siblings Grove had recreated) while the PCS level's
// controller dropped such PodCliques altogether.
func TestTerminatingPodCliquesBothLevelsAgree(t *testing.T) {
	delay := 10 * time.Second
	fresh := breachedCond(metav1.ConditionFalse, t0.Add(-time.Hour))
	at := func(ago time.Duration) metav1.Condition { return breachedCond(metav1.ConditionTrue, t0.Add(-ago)) }
	tests := []struct {
		name                   string
		replicas, minAvailable int32
		cliques                []grovev1alpha1.PodClique

		wantAvailable     int32
		wantGroupBreached metav1.ConditionStatus
		wantGroupKill     []int32 // PCSG replicas the PCSG level terminates
		wantSetKill       []int32 // PCS replicas the PCS level terminates
	}{
		{
			name: "a stale breach on a draining PodClique does not terminate its recreated sibling", replicas: 2, minAvailable: 1,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, fresh), clique("b0", 0, "g", 0, fresh),
				clique("a1", 0, "g", 1), deleting(clique("b1", 0, "g", 1, at(time.Hour))),
			},
			wantAvailable: 1, wantGroupBreached: metav1.ConditionFalse,
		},
		{
			name: "replicas being terminated alone never make the group Below", replicas: 3, minAvailable: 2,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, fresh),
				deleting(clique("a1", 0, "g", 1, at(time.Hour))),
				deleting(clique("a2", 0, "g", 2, at(time.Hour))),
			},
			wantAvailable: 1, wantGroupBreached: metav1.ConditionFalse,
		},
		{
			name: "a replica being terminated is not healthy: a new breach below minAvailable escalates", replicas: 3, minAvailable: 2,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, fresh),
				deleting(clique("a1", 0, "g", 1, at(time.Hour))),
				clique("a2", 0, "g", 2, at(time.Minute)),
			},
			wantAvailable: 1, wantGroupBreached: metav1.ConditionTrue, wantSetKill: []int32{0},
		},
		{
			name: "with room to spare the PCSG terminates the live breached replica only", replicas: 3, minAvailable: 1,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, fresh),
				deleting(clique("a1", 0, "g", 1, at(time.Hour))),
				clique("a2", 0, "g", 2, at(time.Minute)),
			},
			wantAvailable: 1, wantGroupBreached: metav1.ConditionFalse, wantGroupKill: []int32{2},
		},
		{
			name: "a standalone PodClique being deleted does not terminate its replica again", replicas: 1, minAvailable: 1,
			cliques: []grovev1alpha1.PodClique{
				clique("a0", 0, "g", 0, fresh),
				deleting(clique("s", 0, "", 0, at(time.Hour))), clique("t", 0, "", 0),
			},
			wantAvailable: 1, wantGroupBreached: metav1.ConditionFalse,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := group("g", 0, tc.replicas, tc.minAvailable)
			cliques := grove.CliquesOf(tc.cliques...)
			var inGroup []grove.Clique
			for _, c := range cliques {
				if c.Labels[api.LabelPodCliqueScalingGroup] == "g" {
					inGroup = append(inGroup, c)
				}
			}
			agg := AggregateGroup(&g, inGroup, breachesOf(inGroup))
			breached := metav1.ConditionFalse
			if agg.Below {
				breached = metav1.ConditionTrue
			}
			setKill, groupKill, _ := gangs(grove.SetOf(setWithDelay(&delay)), cliques, []grove.ScalingGroup{g})
			type levels struct {
				Available int32
				Breached  metav1.ConditionStatus
				GroupKill []int32
				SetKill   []int32
			}
			want := levels{tc.wantAvailable, tc.wantGroupBreached, tc.wantGroupKill, tc.wantSetKill}
			if diff := cmp.Diff(want, levels{agg.Available(), breached, groupKill, setKill}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
