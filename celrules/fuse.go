package celrules

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/parser"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ruleSet is one evaluation snapshot: the active rules in order, and per
// kind of request the rules that are evaluated together first.
//
// Most admissions pass every rule. Every CEL program evaluation has a fixed
// price in cel-go (an execution frame, a cost tracker and its stack), so for
// each (group, kind, resource, operation) the rules that match it without
// selectors are compiled into one program, the conjunction of the rules'
// conjunctions (compiledRule.passes), over the union of their variables.
// When it is true, none of them has anything to report; otherwise each rule
// is evaluated on its own to find out which failed and why.
type ruleSet struct {
	rules []*compiledRule

	// fused holds a *fusedRules per fusedKey. Every admission looks its
	// entry up, so the lookup takes no lock once the entry exists.
	fused sync.Map
}

type fusedKey struct{ group, kind, resource, operation string }

// fusedRules is the combined program of the rules that match one kind of
// request; program is nil when fewer than two rules qualify or the
// combination does not compile (rules are then evaluated one by one).
type fusedRules struct {
	started atomic.Bool
	done    chan struct{} // closed once built

	members   map[*compiledRule]bool
	variables []compiledVariable
	program   cel.Program
}

func newRuleSet(rules []*compiledRule) *ruleSet {
	return &ruleSet{rules: rules}
}

// fusedFor returns the combined rules for in, or nil while they are being
// compiled. Compiling takes milliseconds, so it happens in the background
// on first use (after start-up and after every policy change) and the
// requests meanwhile are evaluated one by one instead of waiting.
func (s *ruleSet) fusedFor(in *Input) *fusedRules {
	f := s.entry(in)
	select {
	case <-f.done:
		return f
	default:
	}
	if f.started.CompareAndSwap(false, true) {
		go f.build(s.rules, *in)
	}
	return nil
}

// combinedFor is the combined program to try first for in, or nil: when
// combined evaluation is off, while it compiles, or when there is none.
func (s *ruleSet) combinedFor(in *Input, combined bool) *fusedRules {
	if !combined {
		return nil
	}
	if f := s.fusedFor(in); f != nil && f.program != nil {
		return f
	}
	return nil
}

// fusedForNow is fusedFor that waits for the compilation.
func (s *ruleSet) fusedForNow(in *Input) *fusedRules {
	f := s.entry(in)
	if f.started.CompareAndSwap(false, true) {
		f.build(s.rules, *in)
	}
	<-f.done
	return f
}

func (s *ruleSet) entry(in *Input) *fusedRules {
	key := fusedKey{in.Group, in.Kind, in.Resource, in.Operation}
	if f, ok := s.fused.Load(key); ok {
		return f.(*fusedRules)
	}
	f, _ := s.fused.LoadOrStore(key, &fusedRules{done: make(chan struct{})})
	return f.(*fusedRules)
}

func (f *fusedRules) build(rules []*compiledRule, in Input) {
	defer close(f.done)
	var members []*compiledRule
	byName := map[string]compiledVariable{}
	var vars []compiledVariable
next:
	for _, cr := range rules {
		if cr.passes == nil || !cr.namespaceSelector.Empty() || !cr.objectSelector.Empty() || !matchesResource(cr, &in) {
			continue
		}
		// A variable name must mean the same thing in every member.
		for _, v := range cr.variables {
			if have, ok := byName[v.name]; ok && have.sharedKey != v.sharedKey {
				continue next
			}
		}
		for _, v := range cr.variables {
			if _, ok := byName[v.name]; !ok {
				byName[v.name] = v
				vars = append(vars, compiledVariable{name: v.name, sharedKey: v.sharedKey, expression: v.expression})
			}
		}
		members = append(members, cr)
	}
	if len(members) < 2 {
		return
	}
	body := combine(members)
	if src, ok := inlineVariables(vars, body); ok {
		if compiler, err := plugincel.NewCompositedCompiler(bindingsEnv); err == nil {
			if res := compiler.CompileCELExpression(boolExpr(src), optionalVars, environment.StoredExpressions); res.Error == nil {
				f.use(members, nil, res.Program)
				return
			}
		}
	}
	compiler, err := plugincel.NewCompositedCompiler(baseEnv)
	if err != nil {
		return
	}
	for i, v := range vars {
		res := compiler.CompileAndStoreVariable(namedExpr{name: v.name, expression: v.expression}, optionalVars, environment.StoredExpressions)
		if res.Error != nil {
			return
		}
		vars[i].program = res.Program
	}
	res := compiler.CompileCELExpression(boolExpr(body), optionalVars, environment.StoredExpressions)
	if res.Error != nil {
		return
	}
	f.use(members, vars, res.Program)
}

func (f *fusedRules) use(members []*compiledRule, vars []compiledVariable, program cel.Program) {
	f.members = make(map[*compiledRule]bool, len(members))
	for _, cr := range members {
		f.members[cr] = true
	}
	f.variables, f.program = vars, program
}

func matchesResource(cr *compiledRule, in *Input) bool {
	for _, rr := range cr.rule.Match.Resources {
		if matchResourceRule(rr, in) {
			return true
		}
	}
	return false
}

// combine is the conjunction of the rules' conjunctions, arranged to do
// less work while being true exactly when every rule's conjunction is:
//   - rules with the same matchConditions share one conditional,
//     `(C) ? (V1 && V2 ...) : true`, so the conditions are evaluated once;
//     it is true exactly when each rule's own `(C) ? (Vi) : true` is (and an
//     error in C is an error either way);
//   - validations `R.all(x, P)` over the same range R and variable x, among
//     the rules without matchConditions or within one conditional, become
//     one `R.all(x, (P1) && (P2) ...)`: it is true exactly when each of them
//     is, and iterates once. (In cel-go a comprehension costs far more to
//     set up than to step through.)
//
// Nothing is moved into or out of a conditional: a condition evaluated
// inside a comprehension would not be evaluated at all over an empty range,
// and its error would go unnoticed.
func combine(rules []*compiledRule) string {
	var top conjuncts
	conditionals := map[string]*conditional{}
	for _, cr := range rules {
		in := &top
		if len(cr.rule.MatchConditions) > 0 {
			conds := conditions(cr.rule)
			c, ok := conditionals[conds]
			if !ok {
				c = &conditional{conditions: conds}
				conditionals[conds] = c
				top.parts = append(top.parts, c)
			}
			in = &c.body
		}
		for _, v := range cr.rule.Validations {
			in.add(v.Expression)
		}
	}
	return top.String()
}

// conjuncts is a conjunction being built: its terms in order of first
// appearance, each a string, an *allTerm or a *conditional.
type conjuncts struct {
	parts []any
	alls  map[string]*allTerm // by range and variable
}

// allTerm is `rng.all(iterVar, (bodies[0]) && ...)`.
type allTerm struct {
	rng, iterVar string
	bodies       []string
}

// conditional is `(conditions) ? (body) : true`.
type conditional struct {
	conditions string
	body       conjuncts
}

func (c *conjuncts) add(expr string) {
	rng, iterVar, body, ok := splitAll(expr)
	if !ok {
		c.parts = append(c.parts, "("+expr+")")
		return
	}
	key := rng + "\x00" + iterVar
	if t, ok := c.alls[key]; ok {
		t.bodies = append(t.bodies, body)
		return
	}
	if c.alls == nil {
		c.alls = map[string]*allTerm{}
	}
	t := &allTerm{rng: rng, iterVar: iterVar, bodies: []string{body}}
	c.alls[key] = t
	c.parts = append(c.parts, t)
}

func (c *conjuncts) String() string {
	if len(c.parts) == 0 {
		return "true"
	}
	src := make([]string, len(c.parts))
	for i, p := range c.parts {
		switch p := p.(type) {
		case string:
			src[i] = p
		case *allTerm:
			src[i] = "(" + p.rng + ").all(" + p.iterVar + ", (" + strings.Join(p.bodies, ") && (") + "))"
		case *conditional:
			src[i] = "(" + implication(p.conditions, p.body.String()) + ")"
		}
	}
	return strings.Join(src, " && ")
}

// macrolessParser parses without expanding macros, so `R.all(x, P)` is
// still a call to take apart.
var macrolessParser = func() *parser.Parser {
	p, err := parser.NewParser(parser.Macros(), parser.EnableOptionalSyntax(true))
	if err != nil {
		panic(err)
	}
	return p
}()

// splitAll takes `R.all(x, P)` apart into the source of R, x and the source
// of P.
func splitAll(expr string) (rng, iterVar, body string, ok bool) {
	parsed, errs := macrolessParser.Parse(common.NewTextSource(expr))
	if errs != nil && len(errs.GetErrors()) > 0 {
		return "", "", "", false
	}
	e := parsed.Expr()
	if e.Kind() != ast.CallKind || e.AsCall().FunctionName() != "all" || !e.AsCall().IsMemberFunction() || len(e.AsCall().Args()) != 2 {
		return "", "", "", false
	}
	call := e.AsCall()
	if call.Args()[0].Kind() != ast.IdentKind {
		return "", "", "", false
	}
	info := parsed.SourceInfo()
	r, err := parser.Unparse(call.Target(), info)
	if err != nil {
		return "", "", "", false
	}
	b, err := parser.Unparse(call.Args()[1], info)
	if err != nil {
		return "", "", "", false
	}
	return r, call.Args()[0].AsIdent(), b, true
}
