package gang

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
)

// SetInput is what the decision about one Inference PodCliqueSet reads.
type SetInput struct {
	Set *grove.Set
	// Cliques are every PodClique of the set, standalone and PCSG-managed.
	Cliques []grove.Clique
	// Groups are every PodCliqueScalingGroup of the set.
	Groups []grove.ScalingGroup
	// Pods are every pod of the set; a pod counts for the PodClique
	// (that incarnation, by UID) that owns it.
	Pods []corev1.Pod
	// Record is the set's WorkloadRecord status as read; nil when it has
	// no record yet.
	Record *shepherdv1alpha1.WorkloadRecordStatus
	// Mode is the gang-termination setting: auto or on (off decides
	// nothing and never gets here).
	Mode integrations.Mode
}

// Breach is one breached constituent of a PodCliqueSet replica.
type Breach struct {
	// Kind is api.KindPodClique (standalone) or api.KindPodCliqueScalingGroup.
	Kind, Name string
	Replica    int32
	Since      time.Time
	Delay      time.Duration
}

// Termination is one gang to terminate: a PodCliqueSet replica (Level
// LevelPCS, Replica its index) or a PodCliqueScalingGroup replica (Level
// LevelPCSG, Group the group, Replica the group's replica index).
type Termination struct {
	Level   string
	Group   string
	Replica int32
	// Breach is the breach whose delay expired first.
	Breach Breach
	// Victims are the live PodCliques to delete.
	Victims []*grove.Clique
}

// ExpiredAt is when the termination's delay expired.
func (t Termination) ExpiredAt() time.Time { return t.Breach.Since.Add(t.Breach.Delay) }

// Write is the one write a decision makes.
type Write int

// Writes, one per reconcile: the record first, so that a breach's start is
// durable before a delay measured from it can end in a deletion.
const (
	WriteNone Write = iota
	// WriteRecord writes Status to the set's WorkloadRecord.
	WriteRecord
	// WriteTerminate deletes the Victims of each Termination.
	WriteTerminate
)

// SetDecision is the decision about one Inference PodCliqueSet.
type SetDecision struct {
	Write Write
	// Status is the record status the decision wants; written when it
	// differs from the one read.
	Status    shepherdv1alpha1.WorkloadRecordStatus
	Terminate []Termination
	// LeftToGrove are the expired breaches shepherd leaves to Grove under
	// the setting on (see Decide).
	LeftToGrove []Breach
	// RequeueAfter is the shortest remaining delay; zero means none.
	RequeueAfter time.Duration
}

// Under the setting on beside Grove, a gang Grove would terminate too is
// left to Grove unless shepherd's delay ends at least groveMargin before
// Grove's (Grove's own breach times are whole seconds and its timers run
// late; a margin this wide keeps the two from deleting the same gang one
// after the other). If the gang still stands groveGrace after Grove's delay
// ended, Grove is not doing it and shepherd does.
const (
	groveMargin = 5 * time.Second
	groveGrace  = 30 * time.Second
)

// Decide is the gang-termination decision for an Inference PodCliqueSet, a
// pure function of the objects read and now:
//
//  1. Who enforces. Under auto, a set whose PodCliques or scaling groups
//     carry a MinAvailableBreached that Grove wrote (GroveSign) is Grove's:
//     the record says so and shepherd derives and deletes nothing. Under on,
//     or where Grove writes nothing, shepherd enforces.
//  2. Per live PodClique, wasAvailable and the breach start (DecideClique),
//     kept in the record; an entry for another incarnation is stale, and a
//     clique without one is read once from what an earlier shepherd kept
//     on the PodClique (grove.WasAvailable, its own MinAvailableBreached).
//     A changed record is the decision's one write.
//  3. Terminations. A PCSG replica whose breach outlasted the group's
//     delay goes, unless the group's healthy replicas are below its
//     minAvailable; then the group is a breach of its PodCliqueSet
//     replica, which goes — every PodClique of it — once a breach outlasted
//     its delay. A set without terminationDelay terminates nothing.
//  4. Under on, where Grove too writes the set's breaches, each expiry
//     Grove would act on no later (its MinAvailableBreached on one of the
//     victims, from the set's delay, within groveMargin) is left to Grove,
//     for groveGrace: exactly one actor deletes a gang.
func Decide(in SetInput, now time.Time) SetDecision {
	var out SetDecision
	if grove.IsTrainingSet(in.Set) {
		return out // package training's: a breach there is a restart
	}
	manager, why := GroveSign(in.Cliques, in.Groups)
	if in.Mode != integrations.ModeOn && manager != "" {
		out.Status.GangTermination = &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerGrove,
			Message: why + "; Grove gang-terminates this set itself (setting auto)"}
		out.Write = recordWrite(in.Record, out.Status)
		return out
	}
	msg := "no field manager but shepherd's writes MinAvailableBreached on this set's PodCliques"
	if manager != "" {
		msg = why + "; shepherd enforces too (setting on) and leaves to Grove each gang Grove would terminate no later"
	}
	out.Status.GangTermination = &shepherdv1alpha1.GangTermination{EnforcedBy: shepherdv1alpha1.EnforcerShepherd, Message: msg}

	breaches := BreachTimes{}
	out.Status.Cliques = decideCliques(in, now, breaches)
	if out.Write = recordWrite(in.Record, out.Status); out.Write != WriteNone {
		return out
	}
	var wait MinRequeue
	out.Terminate = expiredGangs(in, breaches, now, &wait)
	if manager != "" {
		out.Terminate = out.leaveToGrove(in, now, &wait)
	}
	if len(out.Terminate) > 0 {
		out.Write = WriteTerminate
	}
	out.RequeueAfter = time.Duration(wait)
	return out
}

// recordWrite is WriteRecord when the status wanted differs from the one
// read (or there is no record yet), else WriteNone.
func recordWrite(read *shepherdv1alpha1.WorkloadRecordStatus, want shepherdv1alpha1.WorkloadRecordStatus) Write {
	if read == nil || !equality.Semantic.DeepEqual(*read, want) {
		return WriteRecord
	}
	return WriteNone
}

// decideCliques is step 2: the record's clique entries, sorted by name,
// and the breach times of the live ones.
func decideCliques(in SetInput, now time.Time, breaches BreachTimes) []shepherdv1alpha1.CliqueRecord {
	kept := map[string]shepherdv1alpha1.CliqueRecord{}
	if in.Record != nil {
		for _, c := range in.Record.Cliques {
			kept[c.Name] = c
		}
	}
	pods := map[types.UID][]corev1.Pod{}
	for _, p := range in.Pods {
		for _, ref := range p.OwnerReferences {
			if ref.Kind == api.KindPodClique {
				pods[ref.UID] = append(pods[ref.UID], p)
			}
		}
	}
	var out []shepherdv1alpha1.CliqueRecord
	for i := range in.Cliques {
		c := &in.Cliques[i]
		prev, ok := kept[c.Name]
		if Terminating(c) {
			// Its breach is history (Terminating); what was kept stays
			// until the PodClique made again in its place replaces it.
			if ok {
				out = append(out, prev)
			}
			continue
		}
		ci := CliqueInput{Clique: c, Pods: pods[c.UID]}
		var since *metav1.Time
		if ok && prev.UID == c.UID {
			ci.WasAvailable, since = &prev.WasAvailable, prev.BreachedSince
		} else if t, legacy := legacyBreach(c); legacy && !ok {
			since = &t // an earlier shepherd's own MinAvailableBreached
		}
		d := DecideClique(ci, since, now)
		if d.BreachedSince != nil {
			breaches[c.UID] = d.BreachedSince.Time
		}
		out = append(out, shepherdv1alpha1.CliqueRecord{Name: c.Name, UID: c.UID, WasAvailable: d.WasAvailable, BreachedSince: d.BreachedSince})
	}
	slices.SortFunc(out, func(a, b shepherdv1alpha1.CliqueRecord) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// expiredGangs is step 3.
func expiredGangs(in SetInput, breaches BreachTimes, now time.Time, wait *MinRequeue) []Termination {
	if in.Set.Spec.Template.TerminationDelay == nil {
		return nil
	}
	pcsDelay := in.Set.Spec.Template.TerminationDelay.Duration
	byGroup := map[string][]grove.Clique{}
	byReplica := map[int32][]*grove.Clique{}
	var setBreaches []Breach
	for i := range in.Cliques {
		c := &in.Cliques[i]
		idx := PCSReplicaIndex(c.Labels)
		if !Terminating(c) {
			byReplica[idx] = append(byReplica[idx], c)
		}
		if g := c.Labels[api.LabelPodCliqueScalingGroup]; g != "" {
			byGroup[g] = append(byGroup[g], *c)
			continue
		}
		if idx < 0 || Terminating(c) {
			continue
		}
		if since, ok := breaches.Of(c); ok {
			setBreaches = append(setBreaches, Breach{Kind: api.KindPodClique, Name: c.Name, Replica: idx, Since: since, Delay: pcsDelay})
		}
	}
	var groupTerms []Termination
	for i := range in.Groups {
		g := &in.Groups[i]
		idx := PCSReplicaIndex(g.Labels)
		if idx < 0 || g.DeletionTimestamp != nil {
			continue
		}
		// An override that does not parse falls back to the set's delay;
		// the controller reports it.
		delay := pcsDelay
		if d, _ := GroupDelay(in.Set, g); d != nil {
			delay = *d
		}
		agg := AggregateGroup(g, byGroup[g.Name], breaches)
		if agg.Below {
			setBreaches = append(setBreaches, Breach{Kind: api.KindPodCliqueScalingGroup, Name: g.Name, Replica: idx, Since: agg.Since, Delay: delay})
			continue
		}
		for _, b := range agg.Breached {
			if left := remaining(b.Since, delay, now); left > 0 {
				wait.Add(left)
				continue
			}
			t := Termination{Level: LevelPCSG, Group: g.Name, Replica: b.Index,
				Breach: Breach{Kind: api.KindPodCliqueScalingGroup, Name: g.Name, Replica: idx, Since: b.Since, Delay: delay}}
			for j := range byGroup[g.Name] {
				if c := &byGroup[g.Name][j]; PCSGReplicaIndex(c.Labels) == b.Index && !Terminating(c) {
					t.Victims = append(t.Victims, c)
				}
			}
			groupTerms = append(groupTerms, t)
		}
	}
	expired := map[int32]Breach{}
	for _, b := range setBreaches {
		if left := remaining(b.Since, b.Delay, now); left > 0 {
			wait.Add(left)
			continue
		}
		if old, ok := expired[b.Replica]; !ok || b.Since.Add(b.Delay).Before(old.Since.Add(old.Delay)) {
			expired[b.Replica] = b
		}
	}
	var out []Termination
	for _, r := range slices.Sorted(maps.Keys(expired)) {
		out = append(out, Termination{Level: LevelPCS, Replica: r, Breach: expired[r], Victims: byReplica[r]})
	}
	// A group replica inside a PodCliqueSet replica being terminated goes
	// with it.
	for _, t := range groupTerms {
		if _, ok := expired[t.Breach.Replica]; !ok {
			out = append(out, t)
		}
	}
	return slices.DeleteFunc(out, func(t Termination) bool { return len(t.Victims) == 0 })
}

// leaveToGrove is step 4: the terminations shepherd makes itself.
func (d *SetDecision) leaveToGrove(in SetInput, now time.Time, wait *MinRequeue) []Termination {
	if in.Set.Spec.Template.TerminationDelay == nil {
		return d.Terminate
	}
	delay := in.Set.Spec.Template.TerminationDelay.Duration
	var mine []Termination
	for _, t := range d.Terminate {
		first, ok := time.Time{}, false
		for _, c := range t.Victims {
			if since, byGrove := GroveBreachedSince(c); byGrove && (!ok || since.Before(first)) {
				first, ok = since, true
			}
		}
		if ok && !first.Add(delay).After(t.ExpiredAt().Add(groveMargin)) {
			if left := remaining(first.Add(delay), groveGrace, now); left > 0 {
				d.LeftToGrove = append(d.LeftToGrove, t.Breach)
				wait.Add(left)
				continue
			}
		}
		mine = append(mine, t)
	}
	return mine
}

// String describes a breach for events and logs.
func (b Breach) String() string {
	return fmt.Sprintf("%s %s of replica %d breached MinAvailable at %s; terminationDelay %s", b.Kind, b.Name, b.Replica, b.Since.UTC().Format(time.RFC3339), b.Delay)
}
