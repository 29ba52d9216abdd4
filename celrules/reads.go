package celrules

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Reads is what the active rules read of an UPDATE: the parts ("regions")
// of the object they look at, or that they depend on the request itself
// (who makes it), in which case any UPDATE may change a verdict.
type Reads struct {
	// Regions are the object's parts rules read: "spec", "status", a
	// metadata field ("metadata.labels"), or "metadata" / "*" when a rule
	// reads all of it.
	Regions []string
	// Unconditional, when set, says why every UPDATE must reach the
	// webhooks: a rule reads something an UPDATE that leaves the object
	// alone still changes (the user, the authorizer's answer).
	Unconditional string
}

// GoReads are the regions shepherd's Go code reads on every kind: the
// defaulters, lookups and carriers read the spec and the knobs' annotations
// and labels; D-WL-1 reads the ownerReferences (is the JobSet a TrainJob's).
// name and namespace are immutable on UPDATE.
var GoReads = []string{"metadata.annotations", "metadata.labels", "metadata.ownerReferences", "spec"}

// requestFieldsSameOnUpdate are the request variable's fields that do not
// tell one UPDATE of an object from another.
var requestFieldsSameOnUpdate = []string{"operation", "kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource", "name", "namespace"}

// UpdateReads is what the active rules (built-ins and WorkloadPolicies) read,
// with GoReads: the parts of an object whose change on UPDATE can change a
// verdict. Every expression is parsed (matchConditions, variables,
// validations, messages, field paths); anything that reads the object
// whole, the request's user or the authorizer is treated as reading
// everything.
func (e *Engine) UpdateReads() Reads {
	regions := map[string]bool{}
	for _, r := range GoReads {
		regions[r] = true
	}
	var unconditional []string
	for _, cr := range e.snapshot() {
		for _, r := range cr.reads.regions {
			regions[r] = true
		}
		unconditional = append(unconditional, cr.reads.unconditional...)
	}
	out := Reads{}
	for r := range regions {
		out.Regions = append(out.Regions, r)
	}
	sort.Strings(out.Regions)
	if len(unconditional) > 0 {
		sort.Strings(unconditional)
		out.Unconditional = strings.Join(slices.Compact(unconditional), "; ")
	}
	return out
}

// ruleReads is what one rule's expressions read (readsOfRule), derived
// once when the rule is compiled, for its UPDATE condition (exportRule),
// its RuleInfo.OnUpdate and UpdateReads. UpdateReads runs on every change
// of the rules, and parsing every expression of every rule each time made
// loading n policies cost n² parses (a quarter of a replica's CPU while
// 10,000 WorkloadPolicies loaded); parsing them once per use at compile
// time was another 5 % of a replica's CPU while those policies were
// created (docs/benchmarks.md, "Thousands of WorkloadPolicies").
type ruleReads struct {
	regions []string
	// unconditional says, per expression that makes every UPDATE matter,
	// the rule and why.
	unconditional []string
}

// readsOfRule parses every expression of r for what it reads.
func readsOfRule(r *Rule) ruleReads {
	regions := map[string]bool{}
	var out ruleReads
	for _, expr := range expressionsOf(r) {
		if why := readsOf(expr, regions); why != "" {
			out.unconditional = append(out.unconditional, fmt.Sprintf("%s %s", r.ID, why))
		}
	}
	for r := range regions {
		out.regions = append(out.regions, r)
	}
	sort.Strings(out.regions)
	return out
}

// expressionsOf lists every CEL expression of a rule.
func expressionsOf(r *Rule) []string {
	var out []string
	for _, mc := range r.MatchConditions {
		out = append(out, mc.Expression)
	}
	for _, v := range r.Variables {
		out = append(out, v.Expression)
	}
	for _, v := range r.Validations {
		out = append(out, v.Expression, v.MessageExpression, v.FieldPathsExpression)
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// readsEnv parses (never checks) expressions with the syntax the rules may
// use: macros and optional field selection.
var readsEnv = func() *cel.Env {
	env, err := cel.NewEnv(cel.OptionalTypes())
	if err != nil {
		panic(fmt.Sprintf("celrules: building the parse environment: %v", err))
	}
	return env
}()

// readsOf adds the regions expr reads to regions and returns why it makes
// every UPDATE matter, if it does. An expression that does not parse
// (it cannot have compiled either) reads everything.
func readsOf(expr string, regions map[string]bool) string {
	ast, iss := readsEnv.Parse(expr)
	if iss.Err() != nil {
		regions["*"] = true
		return ""
	}
	w := &readsWalker{regions: regions}
	w.walk(ast.NativeRep().Expr())
	return w.unconditional
}

type readsWalker struct {
	regions       map[string]bool
	unconditional string
}

func (w *readsWalker) walk(e celast.Expr) {
	if chain, ok := selectChain(e); ok {
		w.record(chain)
		return
	}
	switch e.Kind() {
	case celast.CallKind:
		c := e.AsCall()
		if isNullCheck(c) {
			return // oldObject == null tells CREATE from UPDATE; it reads nothing
		}
		if c.IsMemberFunction() {
			w.walk(c.Target())
		}
		for _, a := range c.Args() {
			w.walk(a)
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		for _, x := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			w.walk(x)
		}
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			w.walk(x)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			w.walk(me.Key())
			w.walk(me.Value())
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			w.walk(f.AsStructField().Value())
		}
	case celast.SelectKind:
		w.walk(e.AsSelect().Operand())
	}
}

// isNullCheck reports whether c compares an identifier with null.
func isNullCheck(c celast.CallExpr) bool {
	if c.FunctionName() != operators.Equals && c.FunctionName() != operators.NotEquals {
		return false
	}
	args := c.Args()
	if len(args) != 2 {
		return false
	}
	isNull := func(e celast.Expr) bool {
		return e.Kind() == celast.LiteralKind && e.AsLiteral() == types.NullValue
	}
	isIdent := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind }
	return (isIdent(args[0]) && isNull(args[1])) || (isNull(args[0]) && isIdent(args[1]))
}

// selectChain reads e as an identifier followed by field selections
// (x.f, has(x.f), x.?f, x["f"], x[?"f"]): ["object", "spec", "x"].
func selectChain(e celast.Expr) ([]string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return []string{e.AsIdent()}, true
	case celast.SelectKind:
		s := e.AsSelect()
		base, ok := selectChain(s.Operand())
		if !ok {
			return nil, false
		}
		return append(base, s.FieldName()), true
	case celast.CallKind:
		c := e.AsCall()
		switch c.FunctionName() {
		case operators.OptSelect, operators.Index, operators.OptIndex:
		default:
			return nil, false
		}
		args := c.Args()
		if len(args) != 2 || args[1].Kind() != celast.LiteralKind {
			return nil, false
		}
		key, ok := args[1].AsLiteral().(types.String)
		if !ok {
			return nil, false
		}
		base, ok := selectChain(args[0])
		if !ok {
			return nil, false
		}
		return append(base, string(key)), true
	}
	return nil, false
}

// record files one maximal selection chain.
func (w *readsWalker) record(chain []string) {
	switch chain[0] {
	case "object", "oldObject":
		switch {
		case len(chain) == 1:
			w.regions["*"] = true
		case chain[1] == "metadata" && len(chain) == 2:
			w.regions["metadata"] = true
		case chain[1] == "metadata":
			w.regions["metadata."+chain[2]] = true
		default:
			w.regions[chain[1]] = true
		}
	case "request":
		if len(chain) == 1 || !slices.Contains(requestFieldsSameOnUpdate, chain[1]) {
			field := "request"
			if len(chain) > 1 {
				field += "." + chain[1]
			}
			w.unconditional = "reads " + field
		}
	case "authorizer":
		w.unconditional = "asks the authorizer"
	}
}

// UpdateMatchConditionName names the matchCondition shepherd keeps in its
// webhook configurations from Reads.
const UpdateMatchConditionName = "shepherd.dev/update-changes-what-rules-read"

// UpdateMatchCondition is the matchCondition expression that lets an UPDATE
// reach the webhooks only when it changes a region some rule reads; ok is
// false when no such condition is safe (a rule reads everything or
// depends on the request itself): then every request must be sent.
func (r Reads) UpdateMatchCondition() (expr string, ok bool) {
	if r.Unconditional != "" || slices.Contains(r.Regions, "*") {
		return "", false
	}
	terms := []string{"request.operation != 'UPDATE'"}
	for _, region := range r.Regions {
		path := "?" + region
		if strings.HasPrefix(region, "metadata.") {
			path = "metadata.?" + strings.TrimPrefix(region, "metadata.")
		}
		terms = append(terms, fmt.Sprintf("object.%s != oldObject.%s", path, path))
	}
	return strings.Join(terms, " || "), true
}

// UpdateConditionName names the matchCondition every rule carries that
// reads a part of the object (exportRule adds it; the engine evaluates
// what it exports): on UPDATE the rule is evaluated only when the update
// changes what the rule reads. It is the ratcheting CRD validation does
// for unchanged fields: an object stored before a rule existed that breaks
// it can still have its finalizers, status or owner references changed
// (operators do it constantly, and an object being deleted must lose its
// finalizers), while any change to what the rule judges is judged. The
// background audit, which evaluates stored objects as CREATEs, reports
// such objects.
const UpdateConditionName = "shepherd.dev/update-changes-what-rule-reads"

// maxMatchConditions is the most matchConditions a ValidatingAdmissionPolicy
// may have; a rule may have one fewer (UpdateConditionName).
const maxMatchConditions = 64

// updateCondition is the rule's UpdateConditionName condition; ok is false
// when the rule needs none: it reads nothing of the object (nothing an
// UPDATE changes can change its verdict... unless it reads the request,
// the authorizer or the object whole, which any UPDATE may change).
func (rr ruleReads) updateCondition() (admissionregistrationv1.MatchCondition, bool) {
	regions, ok := rr.updateRegions()
	if !ok {
		return admissionregistrationv1.MatchCondition{}, false
	}
	expr, ok := Reads{Regions: regions}.UpdateMatchCondition()
	if !ok {
		return admissionregistrationv1.MatchCondition{}, false
	}
	return admissionregistrationv1.MatchCondition{Name: UpdateConditionName, Expression: expr}, true
}

// updateRegions are the regions of the object the rule reads, sorted; ok
// is false when it is evaluated on every UPDATE (updateCondition).
func (rr ruleReads) updateRegions() ([]string, bool) {
	if len(rr.unconditional) > 0 || len(rr.regions) == 0 || slices.Contains(rr.regions, "*") {
		return nil, false
	}
	return rr.regions, true
}

// OnUpdateAlways is RuleInfo.OnUpdate of a rule evaluated on every UPDATE.
const OnUpdateAlways = "every UPDATE"

// onUpdate is RuleInfo.OnUpdate: the regions whose change has the rule
// judged on UPDATE, or OnUpdateAlways.
func (rr ruleReads) onUpdate() string {
	regions, ok := rr.updateRegions()
	if !ok {
		return OnUpdateAlways
	}
	return strings.Join(regions, ", ")
}

// GoUpdateCondition is the UPDATE condition of what shepherd's Go code
// reads (GoReads), for the MutatingAdmissionPolicies exported from its Go
// defaulters: the chain skips them on the same UPDATEs (GoReadsChanged).
func GoUpdateCondition() admissionregistrationv1.MatchCondition {
	expr, _ := Reads{Regions: GoReads}.UpdateMatchCondition()
	return admissionregistrationv1.MatchCondition{Name: UpdateConditionName, Expression: expr}
}

// GoReadsChanged reports whether an UPDATE from old to obj changes a region
// of GoReads: when it does not, the Go defaulters and checks have nothing
// new to judge and are skipped, as GoUpdateCondition skips the exported
// defaults.
func GoReadsChanged(obj, old map[string]any) bool {
	if obj == nil || old == nil {
		return true
	}
	for _, region := range GoReads {
		path := strings.Split(region, ".")
		a, _, _ := unstructured.NestedFieldNoCopy(obj, path...)
		b, _, _ := unstructured.NestedFieldNoCopy(old, path...)
		if !equality.Semantic.DeepEqual(a, b) {
			return true
		}
	}
	return false
}
