package celrules

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// Built-in rules read seed knobs through tokens that compileBuiltins
// expands into the knob's form on the schemas being compiled against (the
// seed field, or its carrier annotation; integrations/knob). The rule is
// then plain CEL that type-checks against the cluster's schema, and its
// exported ValidatingAdmissionPolicy reads the same form.
//
//	$(K)           typed value on object (optional<int|string|duration>, bool for presence)
//	$(K@old)       the same on oldObject
//	$(K.raw)       optional of the stored value (field value or annotation string); .raw@old on oldObject
//	$(K.text)      the stored value as a string, for messages ('' when absent)
//	$(K.valid)     false when the carrier annotation does not parse (true in the field form)
//	$(K.path)      the knob's field path, for fieldPath
//	$(K.name)      the knob named for a user ("spec.workloadType", "annotation shepherd.dev/workload-type")
//	$(K.expect)    what a well-formed carrier holds ("an integer")
//	$(K:g)         scalingGroupDelay only: optional<string> override of the group bound to variable g
//	$(trainingSpec)        a PodCliqueSet's trainingSpec is set (the seed object, or either carrier)
//	$(trainingSpec.paths)  where, for fieldPathsExpression: spec.trainingSpec, or the carrier set
//
// The knobs and multi-knob tokens are those the integrations register
// (integrations.Knobs, integrations.Tokens).
var (
	knobTokens  = sync.OnceValue(integrations.Knobs)
	multiTokens = sync.OnceValue(integrations.Tokens)
)

var knobToken = regexp.MustCompile(`\$\(([A-Za-z]+)(\.(?:raw|text|valid|paths|path|name|expect))?(@old|:[a-z]+)?\)`)

// expandKnobs returns r with every knob token replaced by its form on s.
func expandKnobs(r Rule, s knob.FieldSchemas) (Rule, error) {
	var firstErr error
	expand := func(in string) string {
		return knobToken.ReplaceAllStringFunc(in, func(tok string) string {
			m := knobToken.FindStringSubmatch(tok)
			if t, ok := multiTokens()[m[1]]; ok && (m[2] == "" || m[2] == ".paths") && m[3] == "" {
				return t(m[2], "object", s)
			}
			kt, ok := knobTokens()[m[1]]
			k := kt.Knob
			if !ok {
				if firstErr == nil {
					firstErr = fmt.Errorf("rule %s: unknown knob %q in %s", r.ID, m[1], tok)
				}
				return tok
			}
			f := k.Form(s)
			obj := "object"
			if m[3] == "@old" {
				obj = "oldObject"
			}
			switch m[2] {
			case ".raw":
				return k.CELRaw(f, obj)
			case ".text":
				return k.CELText(f, obj)
			case ".valid":
				if kt.Valid != nil {
					return kt.Valid(f, obj)
				}
				return k.CELValid(f, obj)
			case ".path":
				// A knob inside list items ("groups.[].x") is reported
				// on the list: a fieldPath names one field.
				p, _, _ := strings.Cut(k.FieldPath(f), ".[]")
				return p
			case ".name":
				return k.Describe(f)
			case ".expect":
				if kt.Expect != "" {
					return kt.Expect
				}
				return k.ValidDescription()
			}
			if len(m[3]) > 1 && m[3][0] == ':' {
				if kt.Item == nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("rule %s: knob %q is not set per list item, in %s", r.ID, m[1], tok)
					}
					return tok
				}
				return kt.Item(f, obj, m[3][1:])
			}
			return k.CELValue(f, obj)
		})
	}
	out := r
	out.WorkloadPolicySpec = *r.WorkloadPolicySpec.DeepCopy()
	for i := range out.MatchConditions {
		out.MatchConditions[i].Expression = expand(out.MatchConditions[i].Expression)
	}
	for i := range out.Variables {
		out.Variables[i].Expression = expand(out.Variables[i].Expression)
	}
	for i := range out.Validations {
		v := &out.Validations[i]
		v.Expression = expand(v.Expression)
		v.Message = expand(v.Message)
		v.MessageExpression = expand(v.MessageExpression)
		v.FieldPath = expand(v.FieldPath)
		v.FieldPathsExpression = expand(v.FieldPathsExpression)
	}
	return out, firstErr
}

var _ knob.FieldSchemas = (*Schemas)(nil)

// CarrierHint says where a seed field the schema lacks goes instead, for
// messages about a pruned field path ("spec.trainingSpec"): the carrier
// annotations of the knobs at or under it; "" when none is.
func CarrierHint(fieldPath string) string {
	var hints []string
	for _, name := range knobNames() {
		k := knobTokens()[name].Knob
		seed := k.FieldPath(knob.Field)
		if seed == fieldPath || strings.HasPrefix(seed, fieldPath+".") {
			hints = append(hints, fmt.Sprintf("annotation %s for %s", k.Annotation, seed))
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return "use " + strings.Join(hints, ", ")
}

func knobNames() []string { return slices.Sorted(maps.Keys(knobTokens())) }
