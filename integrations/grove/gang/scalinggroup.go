package gang

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// ReplicaBreach is one breached PCSG replica and since when it has been
// breached: the earliest breach start among its breached PodCliques (each
// has been breached since then, so the replica has been since the
// earliest).
type ReplicaBreach struct {
	Index int32
	Since time.Time
}

// GroupBreach is the aggregate breach state of a PodCliqueScalingGroup.
type GroupBreach struct {
	Replicas     int32
	MinAvailable int32
	// Breached lists the breached replicas, earliest first; a replica being
	// terminated is never among them (see Terminating).
	Breached []ReplicaBreach
	// Terminating lists the replicas with a PodClique being deleted, in
	// index order: not healthy, not breached.
	Terminating []int32
	// Below is true when a breach took the healthy replicas below
	// minAvailable. Replicas being terminated count as not healthy, but
	// they alone never make the group Below: that termination was already
	// decided, and answering it again would terminate what replaces them.
	Below bool
	// Since is when the group fell below minAvailable: the breach time of the
	// replica whose breach took it there. Set only when Below.
	Since time.Time
	// Missing is how many of the replicas have no PodClique (yet, or any
	// more): they are not available either (issue 30: a group without
	// PodCliques was reported "2 of 2 replicas available"). A missing
	// replica is not a breach: it never makes the group Below.
	Missing int32
}

// Available is the number of available replicas: those with a PodClique,
// neither breached nor being terminated.
func (g GroupBreach) Available() int32 {
	return max(0, g.unbroken()-g.Missing)
}

// unbroken is the number of replicas neither breached nor being terminated,
// whether their PodCliques exist yet or not: what Below compares with
// minAvailable, so that a replica Grove has yet to create never turns a
// replica-level breach into a group-level one.
func (g GroupBreach) unbroken() int32 {
	return max(0, g.Replicas-int32(len(g.Breached))-int32(len(g.Terminating)))
}

// Terminating reports whether a PodClique is being deleted (deletionTimestamp
// set): its replica is already being terminated — by a gang termination at
// either level, a training restart, Grove or a user. It is the one rule both
// gang levels apply to such a PodClique (AggregateGroup for the
// PodCliqueScalingGroup level, Breaches for the PodCliqueSet level): its
// breach is history, so it neither starts nor expires a terminationDelay — a stale breach on a PodClique still draining must not
// terminate the siblings Grove has just recreated — and its replica is not
// healthy. Only live PodCliques are ever deleted.
func Terminating(c *grove.Clique) bool { return c.DeletionTimestamp != nil }

// BreachTimes holds, per live PodClique UID, when its current breach began
// (DecideClique, kept in the set's WorkloadRecord); a clique absent is not
// breached.
type BreachTimes map[types.UID]time.Time

// Of returns when c's breach began and whether it is breached now.
func (b BreachTimes) Of(c *grove.Clique) (time.Time, bool) {
	t, ok := b[c.UID]
	return t, ok
}

// labelIndex parses an integer label, -1 when it is missing or malformed
// (such an object belongs to no replica and is never terminated).
func labelIndex(labels map[string]string, key string) int32 {
	v, ok := labels[key]
	if !ok {
		return -1
	}
	i, err := strconv.ParseInt(v, 10, 32)
	if err != nil || i < 0 {
		return -1
	}
	return int32(i)
}

// PCSReplicaIndex is the PodCliqueSet replica index of an object, -1 if none.
func PCSReplicaIndex(labels map[string]string) int32 {
	return labelIndex(labels, api.LabelPodCliqueSetReplicaIndex)
}

// PCSGReplicaIndex is the PCSG replica index of a PodClique, -1 if none.
func PCSGReplicaIndex(labels map[string]string) int32 {
	return labelIndex(labels, api.LabelPodCliqueScalingGroupReplica)
}

// AggregateGroup computes the breach state of a PCSG from its PodCliques
// and their breach times.
func AggregateGroup(g *grove.ScalingGroup, cliques []grove.Clique, breaches BreachTimes) GroupBreach {
	since := map[int32]time.Time{}
	seen := map[int32]bool{}
	terminating := map[int32]bool{}
	for i := range cliques {
		c := &cliques[i]
		idx := PCSGReplicaIndex(c.Labels)
		if idx < 0 {
			continue
		}
		seen[idx] = true
		if Terminating(c) {
			terminating[idx] = true
			continue
		}
		if t, ok := breaches.Of(c); ok {
			if old, ok := since[idx]; !ok || t.Before(old) {
				since[idx] = t
			}
		}
	}
	out := GroupBreach{Replicas: g.Spec.Replicas}
	if out.Replicas == 0 {
		out.Replicas = int32(len(seen))
	}
	for idx := range out.Replicas {
		if !seen[idx] {
			out.Missing++
		}
	}
	out.MinAvailable = out.Replicas
	if g.Spec.MinAvailable != nil {
		out.MinAvailable = *g.Spec.MinAvailable
	}
	for idx := range terminating {
		out.Terminating = append(out.Terminating, idx)
	}
	slices.Sort(out.Terminating)
	for idx, t := range since {
		if !terminating[idx] {
			out.Breached = append(out.Breached, ReplicaBreach{Index: idx, Since: t})
		}
	}
	slices.SortFunc(out.Breached, func(a, b ReplicaBreach) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return int(a.Index - b.Index)
	})
	if out.MinAvailable > 0 && out.unbroken() < out.MinAvailable && len(out.Breached) > 0 {
		out.Below = true
		// The group dropped below minAvailable when breach number
		// replicas-minAvailable-terminating+1 happened (index
		// replicas-minAvailable-terminating): the replicas being terminated
		// were already gone from the healthy count.
		k := min(max(int(out.Replicas-out.MinAvailable)-len(out.Terminating), 0), len(out.Breached)-1)
		out.Since = out.Breached[k].Since
	}
	return out
}

// GroupDelay is the effective terminationDelay of a PCSG: nil when the
// PodCliqueSet has none (gang termination off); else the group's override
// (grove.ScalingGroupDelayOf: the PCSG's or its config entry's seed field,
// else the PodCliqueSet's carrier), else the PodCliqueSet's delay. An
// override that does not parse is an error; the PodCliqueSet's delay is
// returned with it, so a caller that only reports the error still acts on
// a sane delay.
func GroupDelay(pcs *grove.Set, g *grove.ScalingGroup) (*time.Duration, error) {
	base := pcs.Spec.Template.TerminationDelay
	if base == nil {
		return nil, nil
	}
	d := base.Duration
	override, err := grove.ScalingGroupDelayOf(pcs, g, GroupConfigName(pcs, g))
	if err != nil {
		return &d, fmt.Errorf("terminationDelay of PodCliqueScalingGroup %s/%s: %w", g.Namespace, g.Name, err)
	}
	if override != nil {
		d = *override
	}
	return &d, nil
}

// GroupConfigName is the name of the PodCliqueSet's scaling-group config a
// PCSG was made from: Grove names a PCSG <pcs>-<replica index>-<config
// name>. "" when g's name is not of that form.
func GroupConfigName(pcs *grove.Set, g *grove.ScalingGroup) string {
	prefix := fmt.Sprintf("%s-%d-", pcs.Name, PCSReplicaIndex(g.Labels))
	name, ok := strings.CutPrefix(g.Name, prefix)
	if !ok {
		return ""
	}
	return name
}
