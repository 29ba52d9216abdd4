package grove

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// The typed accessors, for shepherd's reconcilers. api/grove/v1alpha1 holds
// seed-shaped Go types that also decode Grove's objects — with the seed-only
// fields left empty, since Grove's schema prunes them. Every seed field a
// reconciler needs is read here, from the field when the object holds it,
// else from its carrier; status shepherd keeps is written here, into the
// field when the served schema has it, else into the carrier. Nothing in
// reconcile/ reads or writes a seed-only field or a carrier itself.

// WorkloadTypeOf is a PodCliqueSet's workloadType (GREP-0285): the seed
// field, else the carrier; "" when neither is set (D-PCS-1 makes that
// Inference at admission).
func WorkloadTypeOf(pcs *grovev1alpha1.PodCliqueSet) grovev1alpha1.WorkloadType {
	if pcs == nil {
		return ""
	}
	obj, err := setView(pcs)
	if err != nil {
		return ""
	}
	v, _ := WorkloadType.String(obj)
	return grovev1alpha1.WorkloadType(v)
}

// IsTrainingSet reports whether a PodCliqueSet is a Training workload; nil
// is not.
func IsTrainingSet(pcs *grovev1alpha1.PodCliqueSet) bool {
	return WorkloadTypeOf(pcs) == grovev1alpha1.WorkloadTypeTraining
}

// TrainingLimits are a Training PodCliqueSet's trainingSpec.maxRestarts and
// maxRuntime (field, else carrier); nil when unset. A carrier that does not
// parse, or a value V-PCS-2 forbids (maxRestarts < 0, maxRuntime ≤ 0), is
// an error naming where it was found: admission rejects both, so only an
// object stored before shepherd's rules ran, or edited past them, holds one.
func TrainingLimits(pcs *grovev1alpha1.PodCliqueSet) (maxRestarts *int32, maxRuntime *time.Duration, err error) {
	obj, err := setView(pcs)
	if err != nil {
		return nil, nil, err
	}
	n, err := MaxRestarts.Int(obj)
	if err != nil {
		return nil, nil, err
	}
	if n != nil {
		if *n < 0 || *n > math.MaxInt32 {
			raw, _ := MaxRestarts.Lookup(obj)
			return nil, nil, fmt.Errorf("%s: %d is out of range: want 0 to %d", MaxRestarts.Describe(raw.Form), *n, math.MaxInt32)
		}
		maxRestarts = new(int32(*n))
	}
	d, err := MaxRuntime.Duration(obj)
	if err != nil {
		return nil, nil, err
	}
	if d != nil && *d <= 0 {
		raw, _ := MaxRuntime.Lookup(obj)
		return nil, nil, fmt.Errorf("%s: %s is not positive", MaxRuntime.Describe(raw.Form), *d)
	}
	return maxRestarts, d, nil
}

// ScalingGroupDelayOf is the terminationDelay override of the
// PodCliqueScalingGroup g, made from pcs's scaling-group config named
// config: g's own seed field, else the config entry's seed field, else the
// PodCliqueSet's carrier; nil when there is none (the PodCliqueSet's delay
// applies). g may be nil.
func ScalingGroupDelayOf(pcs *grovev1alpha1.PodCliqueSet, g *grovev1alpha1.PodCliqueScalingGroup, config string) (*time.Duration, error) {
	if g != nil && g.Spec.TerminationDelay != nil {
		d := g.Spec.TerminationDelay.Duration
		return &d, nil
	}
	obj, err := setView(pcs)
	if err != nil {
		return nil, err
	}
	return ScalingGroupDelay(obj, config)
}

// WasAvailable reports whether a PodClique has been available (the Grove
// gang-termination design's sticky bit): the seed status field, or the
// carrier annotation holding "true".
func WasAvailable(pclq *grovev1alpha1.PodClique) bool {
	return pclq.Status.WasAvailable || pclq.Annotations[api.AnnotationWasAvailable] == "true"
}

// UpdateInProgress reports whether a rolling update of a PodClique is in
// progress: started and not yet ended, in the seed's
// status.rollingUpdateProgress or in Grove's status.updateProgress (Grove's
// IsPCLQAutoUpdateInProgress).
func UpdateInProgress(pclq *grovev1alpha1.PodClique) bool {
	for _, p := range []*grovev1alpha1.RollingUpdateProgress{pclq.Status.RollingUpdateProgress, pclq.Status.UpdateProgress} {
		if p != nil && p.UpdateEndedAt == nil {
			return true
		}
	}
	return false
}

// setView is the part of a PodCliqueSet its knobs live in, as the decoded
// JSON the knobs read: the annotations, workloadType, trainingSpec and the
// scaling-group configs — not the clique templates and their pod specs,
// most of the object, which a reconcile would otherwise convert each time.
func setView(pcs *grovev1alpha1.PodCliqueSet) (map[string]any, error) {
	if pcs == nil {
		return nil, fmt.Errorf("no PodCliqueSet")
	}
	v := grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Annotations: pcs.Annotations}}
	v.Spec.WorkloadType = pcs.Spec.WorkloadType
	v.Spec.TrainingSpec = pcs.Spec.TrainingSpec
	v.Spec.Template.PodCliqueScalingGroupConfigs = pcs.Spec.Template.PodCliqueScalingGroupConfigs
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v)
	if err != nil {
		return nil, fmt.Errorf("reading the knobs of PodCliqueSet %s/%s: %w", pcs.Namespace, pcs.Name, err)
	}
	return obj, nil
}

// Status carriers. Where Grove's schema has no field for status shepherd
// kept before its WorkloadRecords, the value lived in an annotation of the
// same object, read once on upgrade (docs/concepts.md, "WorkloadRecords:
// what shepherd derives"); the seed schema (test/seedcrds) has the fields.
// These Knobs only name the two forms: they are not admission knobs (not in
// Knobs).
var (
	// WasAvailableStatus is a PodClique's wasAvailable: "true" when set.
	WasAvailableStatus = knob.Knob{
		Name: "status.wasAvailable", Group: Group, Kinds: []string{api.KindPodClique},
		Path: []string{"status", "wasAvailable"}, Annotation: api.AnnotationWasAvailable, Type: knob.String,
	}
	// PhaseStatus is a Training PodCliqueSet's phase.
	PhaseStatus = knob.Knob{
		Name: "status.phase", Group: Group, Kinds: pcs,
		Path: []string{"status", "phase"}, Annotation: api.AnnotationTrainingPhase, Type: knob.String,
	}
	// RestartCountStatus is a Training PodCliqueSet's restartCount, decimal.
	RestartCountStatus = knob.Knob{
		Name: "status.restartCount", Group: Group, Kinds: pcs,
		Path: []string{"status", "restartCount"}, Annotation: api.AnnotationRestartCount, Type: knob.Int,
	}
	// StartTimeStatus is a Training PodCliqueSet's startTime, RFC 3339.
	StartTimeStatus = knob.Knob{
		Name: "status.startTime", Group: Group, Kinds: pcs,
		Path: []string{"status", "startTime"}, Annotation: api.AnnotationStartTime, Type: knob.String,
	}
)

// StatusForm is where status kept in k lives on a cluster serving s: the
// seed field when the served schema has it, else the carrier. Unlike a
// spec knob's Form, an unknown schema (nil s) means the carrier: a status
// field the schema lacks is pruned without an error, and status lost that
// way (a restart count, a start time) would let a workload restart or run
// forever, whereas every schema keeps an annotation and reading accepts
// both forms.
func StatusForm(k knob.Knob, s knob.FieldSchemas) knob.Form {
	if s == nil {
		return knob.Annotation
	}
	return k.Form(s)
}

// TrainingStatus is the status of a Training PodCliqueSet shepherd keeps
// (GREP-0285): what Grove's PodCliqueSet status has no field for.
type TrainingStatus struct {
	Phase        grovev1alpha1.PodCliqueSetPhase
	RestartCount int32
	StartTime    *metav1.Time
}

// TrainingStatusOf reads a PodCliqueSet's Training status as an earlier
// shepherd kept it (package training reads it once, when a set has no
// WorkloadRecord yet): each value from
// the seed field when the object holds one, else from its carrier. A
// carrier that does not parse is an error naming it (and that value reads
// as unset).
func TrainingStatusOf(pcs *grovev1alpha1.PodCliqueSet) (TrainingStatus, error) {
	st := TrainingStatus{Phase: pcs.Status.Phase, RestartCount: pcs.Status.RestartCount, StartTime: pcs.Status.StartTime}
	var errs []error
	if v, ok := pcs.Annotations[api.AnnotationTrainingPhase]; ok && st.Phase == "" {
		switch p := grovev1alpha1.PodCliqueSetPhase(v); p {
		case grovev1alpha1.PhasePending, grovev1alpha1.PhaseRunning, grovev1alpha1.PhaseSucceeded, grovev1alpha1.PhaseFailed:
			st.Phase = p
		default:
			errs = append(errs, fmt.Errorf("annotation %s: %q is not a phase (Pending, Running, Succeeded, Failed)", api.AnnotationTrainingPhase, v))
		}
	}
	// restartCount 0 is the field's omitted value: a carrier can still say
	// more (an object stored before its CRD gained the field).
	if v, ok := pcs.Annotations[api.AnnotationRestartCount]; ok && st.RestartCount == 0 {
		n, err := knob.ParseInt(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("annotation %s: %w", api.AnnotationRestartCount, err))
		case n < 0 || n > math.MaxInt32:
			errs = append(errs, fmt.Errorf("annotation %s: %d is out of range", api.AnnotationRestartCount, n))
		default:
			st.RestartCount = int32(n)
		}
	}
	if v, ok := pcs.Annotations[api.AnnotationStartTime]; ok && st.StartTime == nil {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %q is not an RFC 3339 time", api.AnnotationStartTime, v))
		} else {
			st.StartTime = new(metav1.NewTime(t))
		}
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("Training status of PodCliqueSet %s/%s: %w", pcs.Namespace, pcs.Name, errors.Join(errs...))
	}
	return st, nil
}

// SetTrainingStatus records st on pcs the way shepherd did before its
// WorkloadRecords, each value in the form the served schema keeps it: the
// status field (and its carrier, if any, removed so the two never
// disagree), or the carrier. A zero value removes its carrier. shepherd no
// longer writes it (package training keeps the status in the set's
// record and reads this form once, TrainingStatusOf, on upgrade); tests
// build the objects an earlier shepherd left with it.
func SetTrainingStatus(pcs *grovev1alpha1.PodCliqueSet, st TrainingStatus, s knob.FieldSchemas) {
	if StatusForm(PhaseStatus, s) == knob.Field {
		pcs.Status.Phase = st.Phase
		deleteAnnotation(&pcs.ObjectMeta, api.AnnotationTrainingPhase)
	} else {
		setOrDelete(&pcs.ObjectMeta, api.AnnotationTrainingPhase, string(st.Phase))
	}
	if StatusForm(RestartCountStatus, s) == knob.Field {
		pcs.Status.RestartCount = st.RestartCount
		deleteAnnotation(&pcs.ObjectMeta, api.AnnotationRestartCount)
	} else {
		v := ""
		if st.RestartCount != 0 {
			v = strconv.FormatInt(int64(st.RestartCount), 10)
		}
		setOrDelete(&pcs.ObjectMeta, api.AnnotationRestartCount, v)
	}
	if StatusForm(StartTimeStatus, s) == knob.Field {
		pcs.Status.StartTime = st.StartTime
		deleteAnnotation(&pcs.ObjectMeta, api.AnnotationStartTime)
	} else {
		v := ""
		if st.StartTime != nil {
			v = st.StartTime.UTC().Format(time.RFC3339)
		}
		setOrDelete(&pcs.ObjectMeta, api.AnnotationStartTime, v)
	}
}

func setOrDelete(m *metav1.ObjectMeta, k, v string) {
	if v == "" {
		deleteAnnotation(m, k)
		return
	}
	setAnnotation(m, k, v)
}

// setAnnotation and deleteAnnotation copy the map before changing it: the
// object is a copy of a cached one whose map it may still share.
func setAnnotation(m *metav1.ObjectMeta, k, v string) {
	if cur, ok := m.Annotations[k]; ok && cur == v {
		return
	}
	out := make(map[string]string, len(m.Annotations)+1)
	for kk, vv := range m.Annotations {
		out[kk] = vv
	}
	out[k] = v
	m.Annotations = out
}

func deleteAnnotation(m *metav1.ObjectMeta, k string) {
	if _, ok := m.Annotations[k]; !ok {
		return
	}
	out := make(map[string]string, len(m.Annotations))
	for kk, vv := range m.Annotations {
		if kk != k {
			out[kk] = vv
		}
	}
	m.Annotations = out
}
