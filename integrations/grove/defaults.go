package grove

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// Defaults are the PodCliqueSet defaulting rules, each defined once as the
// MutatingAdmissionPolicy it exports as (celrules says how they run and
// what every policy reads). Rules that act on the workload type read the
// type D-PCS-1 gives an unset one (Inference, when D-PCS-1 is enabled)
// rather than depend on the order the apiserver runs the policies in.
var Defaults = []mapdefault.Rule{
	{ID: "D-PCS-1", Description: "workloadType unset -> Inference", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// workloadType set in neither form -> Inference, in the form the
		// schema keeps.
		k := WorkloadType
		return mapdefault.Body{
			MatchConditions: append(mapdefault.HasSpec(), mapdefault.Cond("workload-type-unset", "!("+c.KnobRaw(k)+").hasValue()")),
			Patches:         []string{c.SetKnob(k, "'Inference'")},
		}, ""
	}},
	{ID: "D-PCS-2", Description: "Training: template.terminationDelay unset -> 0s", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// Training: template.terminationDelay unset -> 0s; not where the
		// workload type is a carrier (Grove's own schema, whose webhook
		// rejects 0s).
		if WorkloadType.Form(c.Schemas) != knob.Field {
			return mapdefault.Body{}, "does nothing on these schemas: they have no " + WorkloadType.FieldPath(knob.Field) + " (Grove's own PodCliqueSet schema), and there Grove's webhook rejects a terminationDelay of 0s"
		}
		return mapdefault.Body{
			MatchConditions: append(mapdefault.HasSpec(), isWorkloadType(c, "Training"),
				mapdefault.Cond("termination-delay-unset", "object.spec.?template.hasValue() && !object.spec.template.?terminationDelay.hasValue()")),
			Patches: []string{"[JSONPatch{op: 'add', path: '/spec/template/terminationDelay', value: '0s'}]"},
		}, ""
	}},
	{ID: "D-PCS-3", Description: "Training: clique podSpec.restartPolicy unset -> Never", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// Training: every clique's podSpec.restartPolicy unset -> Never.
		return mapdefault.Body{
			MatchConditions: append(mapdefault.HasSpec(), isWorkloadType(c, "Training")),
			Patches: []string{`object.spec.?template.?cliques.orValue([]).transformList(i, c,
  c.?spec.?podSpec.hasValue() && !c.spec.podSpec.?restartPolicy.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/cliques/' + string(i) + '/spec/podSpec/restartPolicy', value: 'Never'})`},
		}, ""
	}},
	{ID: "D-PCS-4", Description: "Training: trainingSpec.maxRestarts unset -> 0", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// Training: maxRestarts unset in either form -> 0, in the form the
		// schema keeps (a carrier set on an object stored before a CRD
		// upgrade added the field is not shadowed by a field default).
		k := MaxRestarts
		body := mapdefault.Body{MatchConditions: append(mapdefault.HasSpec(), isWorkloadType(c, "Training"),
			mapdefault.Cond("max-restarts-carrier-unset", "!("+k.CELRaw(knob.Annotation, "object")+").hasValue()"))}
		if k.Form(c.Schemas) == knob.Annotation {
			body.Patches = []string{c.SetKnob(k, "'0'")}
			return body, ""
		}
		body.Patches = []string{`!object.spec.?trainingSpec.hasValue() ?
  [JSONPatch{op: 'add', path: '/spec/trainingSpec', value: {'maxRestarts': 0}}] :
!object.spec.trainingSpec.?maxRestarts.hasValue() ?
  [JSONPatch{op: 'add', path: '/spec/trainingSpec/maxRestarts', value: 0}] :
  []`}
		return body, ""
	}},
	{ID: "D-PCS-5", Description: "Inference: template.terminationDelay unset -> the configured default (none shipped)", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// Inference: template.terminationDelay unset -> the configured
		// default.
		if c.InferenceTerminationDelay == nil {
			return mapdefault.Body{}, "no default terminationDelay for Inference PodCliqueSets is configured (serve's --inference-termination-delay; none is shipped)"
		}
		return mapdefault.Body{
			MatchConditions: append(mapdefault.HasSpec(), isWorkloadType(c, "Inference"),
				mapdefault.Cond("termination-delay-unset", "object.spec.?template.hasValue() && !object.spec.template.?terminationDelay.hasValue()")),
			Patches: []string{fmt.Sprintf("[JSONPatch{op: 'add', path: '/spec/template/terminationDelay', value: '%s'}]", c.InferenceTerminationDelay.Duration)},
		}, ""
	}},
	{ID: "D-PCS-6", Description: "clique and scaling-group minAvailable unset -> replicas", Kind: podCliqueSet, Build: func(c mapdefault.Context) (mapdefault.Body, string) {
		// minAvailable unset -> replicas, for cliques and scaling groups
		// that have replicas.
		return mapdefault.Body{
			MatchConditions: mapdefault.HasSpec(),
			Patches: []string{
				`object.spec.?template.?cliques.orValue([]).transformList(i, c,
  c.?spec.?replicas.hasValue() && !c.spec.?minAvailable.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/cliques/' + string(i) + '/spec/minAvailable', value: c.spec.replicas})`,
				`object.spec.?template.?podCliqueScalingGroups.orValue([]).transformList(i, g,
  g.?replicas.hasValue() && !g.?minAvailable.hasValue(),
  JSONPatch{op: 'add', path: '/spec/template/podCliqueScalingGroups/' + string(i) + '/minAvailable', value: g.replicas})`,
			},
		}, ""
	}},
}

var podCliqueSet = schema.GroupKind{Group: api.GroveGroup, Kind: api.KindPodCliqueSet}

// workloadType is the workload type a rule acts on: the one set, else the
// one D-PCS-1 gives an unset type when it is enabled.
func workloadType(c mapdefault.Context) string {
	def := ""
	if c.Enabled("D-PCS-1") {
		def = "Inference"
	}
	return fmt.Sprintf("(%s).orValue('%s')", c.KnobRaw(WorkloadType), def)
}

func isWorkloadType(c mapdefault.Context, t string) admissionregistrationv1.MatchCondition {
	return mapdefault.Cond(strings.ToLower(t), fmt.Sprintf("%s == '%s'", workloadType(c), t))
}
