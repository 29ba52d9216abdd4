package trainjob

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// RuntimeTTL is a runtime's ttlSecondsAfterFinished and since when it has
// had that value.
type RuntimeTTL struct {
	Seconds int32
	// Since is when the runtime's TTL was last written (TTLSince); a job
	// that finished before then counts its TTL from then, not from its
	// finish. Zero: unknown, the finish counts.
	Since time.Time
}

// TTLDecision is the outcome of DecideTTL.
type TTLDecision struct {
	// Delete: the TTL expired; delete the TrainJob.
	Delete bool
	// ExpiresAt is max(finish, TTL since) + TTL, when a TTL applies to a
	// finished job.
	ExpiresAt time.Time
	// RequeueAfter is the time left until ExpiresAt when not yet expired;
	// zero when nothing is pending (unfinished job or no TTL).
	RequeueAfter time.Duration
}

// DecideTTL applies the runtime's ttlSecondsAfterFinished (R-TJ) to a
// TrainJob at clk's now. ttl is nil when the runtime sets none (or cannot be
// found). Suspension plays no part.
//
// The TTL counts from the job's finish, or from when the runtime's TTL took
// its value (ttl.Since) if that is later: a TTL added to a runtime, or
// shortened, applies to jobs that finished before as if they had finished
// when it was set, so it never deletes every old finished job at once
// (KEP-2899 lists retro-applying new defaults as a non-goal).
func DecideTTL(tj *trainerv1alpha1.TrainJob, ttl *RuntimeTTL, clk clock.PassiveClock) TTLDecision {
	if ttl == nil {
		return TTLDecision{}
	}
	from, ok := FinishTime(tj)
	if !ok {
		return TTLDecision{}
	}
	if ttl.Since.After(from) {
		from = ttl.Since
	}
	expires := from.Add(time.Duration(ttl.Seconds) * time.Second)
	now := clk.Now()
	if !now.Before(expires) {
		return TTLDecision{Delete: true, ExpiresAt: expires}
	}
	return TTLDecision{ExpiresAt: expires, RequeueAfter: requeueAfter(expires, now)}
}

// TTLSince is when a runtime's TTL took its current value, derived from the
// runtime itself so that a restart of shepherd derives the same: the latest
// time among its managedFields entries that own the TTL, in either form
// (the seed field or the carrier annotation, trainer.RuntimeTTL). The
// apiserver stamps an entry's time whenever its manager changes a field
// it owns, so this is when the TTL was set — or later, when the same
// manager changed something else on the runtime since: an error toward
// keeping finished jobs longer, never toward deleting them early. A
// runtime whose managedFields name no owner of the TTL (stripped by a
// client) gives its creationTimestamp.
func TTLSince(rt metav1.Object) time.Time {
	var since time.Time
	for _, e := range rt.GetManagedFields() {
		if e.FieldsV1 == nil || e.Time == nil || !ownsTTL(e.FieldsV1.Raw) {
			continue
		}
		if e.Time.After(since) {
			since = e.Time.Time
		}
	}
	if since.IsZero() {
		return rt.GetCreationTimestamp().Time
	}
	return since
}

// ownsTTL reports whether a managedFields entry's fieldsV1 names the TTL's
// field or its carrier annotation.
func ownsTTL(raw []byte) bool {
	var set map[string]any
	if err := json.Unmarshal(raw, &set); err != nil {
		return false
	}
	field := make([]string, 0, len(trainer.RuntimeTTL.Path))
	for _, p := range trainer.RuntimeTTL.Path {
		field = append(field, "f:"+p)
	}
	_, inField, _ := unstructured.NestedFieldNoCopy(set, field...)
	_, inCarrier, _ := unstructured.NestedFieldNoCopy(set, "f:metadata", "f:annotations", "f:"+trainer.RuntimeTTL.Annotation)
	return inField || inCarrier
}
