package trainer

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// deadlinePath is TrainJob spec.activeDeadlineSeconds (KEP-2899).
var deadlinePath = []string{"spec", "activeDeadlineSeconds"}

// EnforcesDeadline reports whether Kubeflow Trainer itself enforces a
// TrainJob's activeDeadlineSeconds on a cluster serving s, and why — the
// input of integrations.Enforcement.SetUpstream(FeatureDeadline, ...).
//
// The sign is the served TrainJob schema having spec.activeDeadlineSeconds:
// Trainer added the field in v2.2 together with its enforcement, and the
// TrainJob CRD is Trainer's (shepherd installs no third-party CRD:
// docs/concepts.md, "Beside Trainer, JobSet and Grove"), so a schema with
// the field is served by a Trainer that acts on it. In Trainer v2.3.0,
// pkg/controller/trainjob_controller.go (TrainJobReconciler.reconcileDeadline)
// counts from creationTimestamp or the last Suspended=False transition, and
// once the deadline passes sets Failed=True with reason DeadlineExceeded and
// message "TrainJob exceeded its active deadline" and deletes the TrainJob's
// JobSet (same name); it records no Event for it. It has no TrainJob TTL, so
// only the deadline is Trainer's.
//
// A nil s (no served schema known) is not a sign: shepherd then enforces.
func EnforcesDeadline(s knob.FieldSchemas) (bool, string) {
	if s == nil {
		return false, "no served TrainJob schema is known"
	}
	if s.HasField(schema.GroupKind{Group: Group, Kind: api.KindTrainJob}, deadlinePath) {
		return true, "the served TrainJob schema has spec.activeDeadlineSeconds: Kubeflow Trainer (v2.2 or later) fails the job and deletes its JobSet itself"
	}
	return false, "the served schemas have no TrainJob spec.activeDeadlineSeconds: Trainer is absent or older than v2.2"
}
