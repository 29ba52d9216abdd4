package celrules

import (
	"runtime"
	"strings"
	"sync"
	"weak"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// sharedCondition is a condition compiled once for every rule without
// variables whose expressions are the same: every rule's UPDATE condition
// reading the same parts of the object, the validations of policies a
// platform generates per team. cel-go gives every program a dispatcher of
// its own holding every function of the environment (about 12 KiB), so
// compiled programs, not rules, were most of a replica's memory with
// thousands of WorkloadPolicies (issue 32: 10,000 policies went past the
// chart's 512 MiB). A compiled condition is read-only once built and
// evaluates with the state of the shared compiler every variable-free
// rule compiles with (sharedCompiler), so rules may share it.
type sharedCondition struct {
	key     string
	eval    plugincel.ConditionEvaluator
	results []plugincel.CompilationResult
}

// sharedConditions maps a condition's key (conditionKey) to a weak
// pointer to its sharedCondition: the rules using it hold it, and once
// none does (their policies deleted) it is collected and its entry
// removed.
var sharedConditions sync.Map

// conditionKey identifies what compiling exprs in mode produces: each
// expression with everything its accessor hands the compiled result
// (messages, reasons, names). ok is false for an accessor it does not
// know, which is then compiled for its rule alone.
func conditionKey(mode environment.Type, exprs []plugincel.ExpressionAccessor) (key string, ok bool) {
	var b strings.Builder
	b.WriteString(string(mode))
	for _, e := range exprs {
		b.WriteByte(0)
		switch e := e.(type) {
		case nil:
			b.WriteString("-")
		case *validating.ValidationCondition:
			if e == nil {
				b.WriteString("-")
				continue
			}
			reason := ""
			if e.Reason != nil {
				reason = string(*e.Reason)
			}
			b.WriteString("v\x01" + e.Expression + "\x01" + e.Message + "\x01" + reason)
		case *validating.MessageExpressionCondition:
			if e == nil {
				b.WriteString("-")
				continue
			}
			b.WriteString("m\x01" + e.MessageExpression)
		case *matchconditions.MatchCondition:
			b.WriteString("c\x01" + e.Name + "\x01" + e.Expression)
		case pathsExpr:
			b.WriteString("p\x01" + string(e))
		default:
			return "", false
		}
	}
	return b.String(), true
}

// lookupCondition returns the shared condition of key, nil when there is
// none alive.
func lookupCondition(key string) *sharedCondition {
	v, ok := sharedConditions.Load(key)
	if !ok {
		return nil
	}
	return v.(weak.Pointer[sharedCondition]).Value()
}

// storeCondition makes sc the shared condition of key (or returns the one
// another compile stored first) and removes the entry once sc is
// collected.
func storeCondition(key string, sc *sharedCondition) *sharedCondition {
	wp := weak.Make(sc)
	for {
		prev, loaded := sharedConditions.LoadOrStore(key, wp)
		if !loaded {
			runtime.AddCleanup(sc, func(key string) { sharedConditions.CompareAndDelete(key, wp) }, key)
			return sc
		}
		if live := prev.(weak.Pointer[sharedCondition]).Value(); live != nil {
			return live
		}
		// Collected, its cleanup not run yet: take its place.
		if sharedConditions.CompareAndSwap(key, prev, wp) {
			runtime.AddCleanup(sc, func(key string) { sharedConditions.CompareAndDelete(key, wp) }, key)
			return sc
		}
	}
}
