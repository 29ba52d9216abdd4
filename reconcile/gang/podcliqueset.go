package gang

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// SetInput is what the PodCliqueSet decision reads.
type SetInput struct {
	Set *grovev1alpha1.PodCliqueSet
	// Cliques are every PodClique of the set, standalone and PCSG-managed.
	Cliques []grovev1alpha1.PodClique
	// Groups are every PodCliqueScalingGroup of the set.
	Groups []grovev1alpha1.PodCliqueScalingGroup
}

// Breach is one breached constituent of a PodCliqueSet replica.
type Breach struct {
	// Kind is api.KindPodClique (standalone) or api.KindPodCliqueScalingGroup.
	Kind, Name string
	Replica    int32
	Since      time.Time
	Delay      time.Duration
}

// SetDecision says which PodCliqueSet replicas to terminate.
type SetDecision struct {
	// Terminate lists the replica indices whose PodCliques to delete, each
	// with the breach that expired first.
	Terminate []Breach
	// RequeueAfter is the shortest remaining delay; zero means none.
	RequeueAfter time.Duration
}

// Breaches lists the breached constituents of every replica of a set with
// their effective delay (zero when the set has no terminationDelay): standalone
// PodCliques with MinAvailableBreached=True, and PCSGs whose healthy replicas
// fell below minAvailable — derived from their PodCliques' conditions, not the
// PCSG's own condition, so a stale condition cannot outlive the cliques. A
// PodClique being deleted is judged by Terminating, as the PCSG level
// (AggregateGroup) judges it: never breached, its replica not healthy.
func Breaches(in SetInput) []Breach {
	var pcsDelay time.Duration
	if d := in.Set.Spec.Template.TerminationDelay; d != nil {
		pcsDelay = d.Duration
	}
	var out []Breach
	byGroup := map[string][]grovev1alpha1.PodClique{}
	for i := range in.Cliques {
		c := &in.Cliques[i]
		if g := c.Labels[api.LabelPodCliqueScalingGroup]; g != "" {
			byGroup[g] = append(byGroup[g], *c)
			continue
		}
		idx := PCSReplicaIndex(c.Labels)
		if idx < 0 || Terminating(c) {
			continue
		}
		if since, ok := CliqueBreachedSince(c); ok {
			out = append(out, Breach{Kind: api.KindPodClique, Name: c.Name, Replica: idx, Since: since, Delay: pcsDelay})
		}
	}
	for i := range in.Groups {
		g := &in.Groups[i]
		idx := PCSReplicaIndex(g.Labels)
		if idx < 0 {
			continue
		}
		agg := AggregateGroup(g, byGroup[g.Name])
		if !agg.Below {
			continue
		}
		// An override that does not parse falls back to the set's delay;
		// the PodCliqueScalingGroup controller reports it.
		delay := pcsDelay
		if d, _ := GroupDelay(in.Set, g); d != nil {
			delay = *d
		}
		out = append(out, Breach{Kind: api.KindPodCliqueScalingGroup, Name: g.Name, Replica: idx, Since: agg.Since, Delay: delay})
	}
	return out
}

// DecideSet decides which replicas of an Inference PodCliqueSet to terminate:
// a replica goes when any breached constituent is past its delay. A set
// without terminationDelay, or of workloadType Training (package training
// restarts instead), terminates nothing.
func DecideSet(clk clock.PassiveClock, in SetInput) SetDecision {
	var out SetDecision
	if in.Set.Spec.Template.TerminationDelay == nil || grove.IsTrainingSet(in.Set) {
		return out
	}
	now := clk.Now()
	expired := map[int32]Breach{}
	var wait MinRequeue
	for _, b := range Breaches(in) {
		left := remaining(b.Since, b.Delay, now)
		if left > 0 {
			wait.Add(left)
			continue
		}
		if old, ok := expired[b.Replica]; !ok || b.Since.Add(b.Delay).Before(old.Since.Add(old.Delay)) {
			expired[b.Replica] = b
		}
	}
	for _, b := range expired {
		out.Terminate = append(out.Terminate, b)
	}
	slices.SortFunc(out.Terminate, func(a, b Breach) int { return int(a.Replica - b.Replica) })
	// A replica being terminated needs no requeue for its other breaches:
	// its PodCliques are about to go. Others keep their waits.
	out.RequeueAfter = time.Duration(wait)
	return out
}

// String describes a breach for events and logs.
func (b Breach) String() string {
	return fmt.Sprintf("%s %s of replica %d breached MinAvailable at %s; terminationDelay %s", b.Kind, b.Name, b.Replica, b.Since.UTC().Format(time.RFC3339), b.Delay)
}
