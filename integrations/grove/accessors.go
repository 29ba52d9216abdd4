package grove

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// The accessors, for shepherd's reconcilers. Every seed field a reconciler
// needs is read here from the object as served (served.go): from the field
// when the cluster's schema keeps it (the seed CRDs), else from its carrier
// (Grove's schema). Nothing else reads a seed field or a carrier.

// The workload types of a PodCliqueSet's workloadType (GREP-0285).
const (
	WorkloadTypeInference = "Inference"
	WorkloadTypeTraining  = "Training"
)

// WorkloadTypeOf is a PodCliqueSet's workloadType: the seed field, else the
// carrier; "" when neither is set (D-PCS-1 makes that Inference at
// admission).
func WorkloadTypeOf(s *Set) string {
	if s == nil || s.Served == nil {
		return ""
	}
	v, _ := WorkloadType.String(s.Served.Object)
	return v
}

// IsTrainingSet reports whether a PodCliqueSet is a Training workload; nil
// is not.
func IsTrainingSet(s *Set) bool { return s != nil && s.Served != nil && IsTraining(s.Served.Object) }

// TrainingLimits are a Training PodCliqueSet's trainingSpec.maxRestarts and
// maxRuntime (field, else carrier); nil when unset. A carrier that does not
// parse, or a value V-PCS-2 forbids (maxRestarts < 0, maxRuntime ≤ 0), is
// an error naming where it was found: admission rejects both, so only an
// object stored before shepherd's rules ran, or edited past them, holds one.
func TrainingLimits(s *Set) (maxRestarts *int32, maxRuntime *time.Duration, err error) {
	obj := s.Served.Object
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
// PodCliqueScalingGroup g, made from s's scaling-group config named config:
// g's own seed field, else the config entry's seed field, else the
// PodCliqueSet's carrier; nil when there is none (the PodCliqueSet's delay
// applies). g may be nil.
func ScalingGroupDelayOf(s *Set, g *ScalingGroup, config string) (*time.Duration, error) {
	if g != nil && g.Served != nil {
		if v, ok, _ := unstructured.NestedString(g.Served.Object, "spec", "terminationDelay"); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("spec.terminationDelay: %q is not a duration", v)
			}
			return &d, nil
		}
	}
	return ScalingGroupDelay(s.Served.Object, config)
}

// WasAvailable reports whether a PodClique has been available (the Grove
// gang-termination design's sticky bit): the seed status field, or the
// carrier annotation holding "true".
func WasAvailable(c *Clique) bool {
	if c.Annotations[api.AnnotationWasAvailable] == "true" {
		return true
	}
	v, _, _ := unstructured.NestedFieldNoCopy(c.Served.Object, "status", "wasAvailable")
	return v == true
}

// UpdateInProgress reports whether a rolling update of a PodClique is in
// progress: started and not yet ended, in Grove's status.updateProgress
// (Grove's IsPCLQAutoUpdateInProgress) or in the seed's
// status.rollingUpdateProgress.
func UpdateInProgress(c *Clique) bool {
	if p := c.Status.UpdateProgress; p != nil && p.UpdateEndedAt == nil {
		return true
	}
	p, ok, _ := unstructured.NestedFieldNoCopy(c.Served.Object, "status", "rollingUpdateProgress")
	if m, isMap := p.(map[string]any); ok && isMap {
		_, ended := m["updateEndedAt"]
		return !ended
	}
	return false
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

// TrainingStatus is the status of a Training PodCliqueSet shepherd kept
// (GREP-0285) before its WorkloadRecords: what Grove's PodCliqueSet status
// has no field for.
type TrainingStatus struct {
	Phase        shepherdv1alpha1.Phase
	RestartCount int32
	StartTime    *metav1.Time
}

// TrainingStatusOf reads a PodCliqueSet's Training status as an earlier
// shepherd kept it (package training reads it once, when a set has no
// WorkloadRecord yet): each value from the seed field when the object holds
// one, else from its carrier. A value that does not parse is an error
// naming it (and that value reads as unset).
func TrainingStatusOf(s *Set) (TrainingStatus, error) {
	var st TrainingStatus
	var errs []error
	if raw, where, ok := statusValue(s, PhaseStatus); ok {
		switch p := shepherdv1alpha1.Phase(fmt.Sprint(raw)); p {
		case shepherdv1alpha1.PhasePending, shepherdv1alpha1.PhaseRunning, shepherdv1alpha1.PhaseSucceeded, shepherdv1alpha1.PhaseFailed:
			st.Phase = p
		default:
			errs = append(errs, fmt.Errorf("%s: %q is not a phase (Pending, Running, Succeeded, Failed)", where, raw))
		}
	}
	if raw, where, ok := statusValue(s, RestartCountStatus); ok {
		n, err := restartCount(raw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		case n < 0 || n > math.MaxInt32:
			errs = append(errs, fmt.Errorf("%s: %d is out of range", where, n))
		default:
			st.RestartCount = int32(n)
		}
	}
	if raw, where, ok := statusValue(s, StartTimeStatus); ok {
		t, err := time.Parse(time.RFC3339, fmt.Sprint(raw))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an RFC 3339 time", where, raw))
		} else {
			st.StartTime = new(metav1.NewTime(t))
		}
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("Training status of PodCliqueSet %s/%s: %w", s.Namespace, s.Name, errors.Join(errs...))
	}
	return st, nil
}

// statusValue is the value of a status kept in k: the field when the
// served object has one that says something (a restartCount of 0 is the
// field's omitted value, so a carrier can still say more: an object stored
// before its CRD gained the field), else the carrier.
func statusValue(s *Set, k knob.Knob) (raw any, where string, ok bool) {
	if v, ok, _ := unstructured.NestedFieldNoCopy(s.Served.Object, k.Path...); ok && v != nil && v != "" && v != int64(0) {
		return v, strings.Join(k.Path, "."), true
	}
	if v, ok := s.Annotations[k.Annotation]; ok {
		return v, "annotation " + k.Annotation, true
	}
	return nil, "", false
}

func restartCount(raw any) (int64, error) {
	switch v := raw.(type) {
	case int64:
		return v, nil
	case float64:
		return int64(v), nil
	case string:
		return knob.ParseInt(v)
	}
	return 0, fmt.Errorf("%v is not a number", raw)
}

// SetTrainingStatus records st on s the way shepherd did before its
// WorkloadRecords, each value in the form the served schema keeps it: the
// status field (and its carrier, if any, removed so the two never
// disagree), or the carrier. A zero value removes its carrier. shepherd no
// longer writes it (package training keeps the status in the set's record
// and reads this form once, TrainingStatusOf, on upgrade); tests build the
// objects an earlier shepherd left with it.
func SetTrainingStatus(s *Set, st TrainingStatus, schemas knob.FieldSchemas) {
	u := s.Served.DeepCopy()
	start := ""
	if st.StartTime != nil {
		start = st.StartTime.UTC().Format(time.RFC3339)
	}
	count := ""
	if st.RestartCount != 0 {
		count = strconv.FormatInt(int64(st.RestartCount), 10)
	}
	for _, v := range []struct {
		k     knob.Knob
		field any
		s     string
	}{
		{PhaseStatus, string(st.Phase), string(st.Phase)},
		{RestartCountStatus, int64(st.RestartCount), count},
		{StartTimeStatus, start, start},
	} {
		a := u.GetAnnotations()
		if StatusForm(v.k, schemas) == knob.Field {
			unstructured.RemoveNestedField(u.Object, v.k.Path...)
			if v.s != "" {
				_ = unstructured.SetNestedField(u.Object, v.field, v.k.Path...)
			}
			delete(a, v.k.Annotation)
		} else if v.s == "" {
			delete(a, v.k.Annotation)
		} else {
			if a == nil {
				a = map[string]string{}
			}
			a[v.k.Annotation] = v.s
		}
		u.SetAnnotations(a)
	}
	s.Served = u
	s.Annotations = u.GetAnnotations()
}
