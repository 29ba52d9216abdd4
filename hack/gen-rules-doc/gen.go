package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/policytest"
)

// The inputs, relative to the repository's root.
const (
	rulesGlob   = "integrations/*/rules/*.yaml"
	suitesDir   = "celrules/rules/tests"
	examplesDir = "examples/invalid"
	notesFile   = "docs/rules-notes.yaml"
	// docDir is where the reference is written: its links are relative to it.
	docDir = "docs"
)

// note is a rule's hand-written entry in docs/rules-notes.yaml.
type note struct {
	// Why the rule exists: the KEP or GREP it comes from, what breaks
	// without it. Required.
	Why string `json:"why"`
	// Fix says how to change a denied object. Required.
	Fix string `json:"fix"`
	// Checks adds detail to the listing's one-line description.
	Checks string `json:"checks,omitempty"`
	// Layer says who enforces the rule on a real cluster (the CRD, an
	// upstream webhook or controller, shepherd), beside what the headers of
	// examples/invalid say.
	Layer string `json:"layer,omitempty"`
	// Example names the suite case to show, as FILE#CASE (FILE relative to
	// the repository's root), instead of the one the generator would pick.
	Example string `json:"example,omitempty"`
}

// ListRules returns what `shepherd export rules -o json` lists, run in
// process.
func ListRules() ([]celrules.RuleInfo, error) {
	var out, errOut bytes.Buffer
	if code := app.Main([]string{"export", "rules", "-o", "json"}, &out, &errOut); code != 0 {
		return nil, fmt.Errorf("shepherd export rules exited %d: %s", code, strings.TrimSpace(errOut.String()))
	}
	var rules []celrules.RuleInfo
	if err := json.Unmarshal(out.Bytes(), &rules); err != nil {
		return nil, fmt.Errorf("shepherd export rules -o json: %w", err)
	}
	return rules, nil
}

// violation is a violation as `shepherd test -o json` reports it.
type violation struct {
	Rule    string `json:"rule"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  string `json:"action"`
}

// testReport is the part of `shepherd test -o json` read here.
type testReport struct {
	Failed int `json:"failed"`
	Suites []struct {
		File  string `json:"file"`
		Cases []struct {
			Name      string `json:"name"`
			Operation string `json:"operation"`
			Got       *struct {
				Allowed    bool        `json:"allowed"`
				Violations []violation `json:"violations"`
				Warnings   []string    `json:"warnings"`
			} `json:"got"`
		} `json:"cases"`
	} `json:"suites"`
}

// suiteCase is one case of the rules' suites with what shepherd answered.
type suiteCase struct {
	file      string
	suite     *policytest.Suite
	c         *policytest.Case
	operation string
	allowed   bool
	got       []violation
	warnings  []string
}

// runSuites loads the rules' suites and runs them in process (`shepherd
// test -o json`); every case must pass, so every answer shown is one the
// suite asserts.
func runSuites() ([]*suiteCase, error) {
	files, err := policytest.Discover([]string{suitesDir})
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	code := app.Main([]string{"test", "-o", "json", suitesDir}, &out, &errOut)
	var rep testReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("shepherd test -o json %s exited %d: %s %w", suitesDir, code, strings.TrimSpace(errOut.String()), err)
	}
	if code != 0 || rep.Failed != 0 {
		return nil, fmt.Errorf("shepherd test %s: %d cases failed (exit %d): fix the suites first", suitesDir, rep.Failed, code)
	}
	type key struct{ file, name string }
	results := map[key]int{}
	var cases []*suiteCase
	for _, f := range files {
		s, err := policytest.Load(f)
		if err != nil {
			return nil, err
		}
		for i := range s.Cases {
			results[key{filepath.Clean(f), s.Cases[i].Name}] = len(cases)
			cases = append(cases, &suiteCase{file: filepath.ToSlash(filepath.Clean(f)), suite: s, c: &s.Cases[i]})
		}
	}
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			i, ok := results[key{filepath.Clean(s.File), c.Name}]
			if !ok || c.Got == nil {
				continue
			}
			cases[i].operation, cases[i].allowed = c.Operation, c.Got.Allowed
			cases[i].got, cases[i].warnings = c.Got.Violations, c.Got.Warnings
		}
	}
	return cases, nil
}

// ruleFiles maps each built-in CEL rule's ID to its file, beside its
// integration (integrations/<framework>/rules).
func ruleFiles() (map[string]string, error) {
	files, err := filepath.Glob(rulesGlob)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rf struct {
			Rules []struct {
				ID string `json:"id"`
			} `json:"rules"`
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, r := range rf.Rules {
			out[r.ID] = filepath.ToSlash(f)
		}
	}
	return out, nil
}

// invalidExample is one file of examples/invalid and what its header says.
type invalidExample struct {
	file     string
	rejected []string
	realLine string
}

var ruleIDPattern = regexp.MustCompile(`[VD]-[A-Z]+-[0-9]+`)

// invalidExamples reads the headers of examples/invalid: "# shepherd:
// rejected A, B; warns C" and "# on a real cluster: ...", which runs to
// the end of the header.
func invalidExamples() ([]invalidExample, error) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []invalidExample
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ex := invalidExample{file: filepath.ToSlash(f)}
		var real []string
		inReal := false
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") {
				break
			}
			text := strings.TrimSpace(strings.TrimPrefix(line, "#"))
			switch {
			case strings.HasPrefix(text, "shepherd:"):
				verdicts := strings.TrimSpace(strings.TrimPrefix(text, "shepherd:"))
				for _, part := range strings.Split(verdicts, ";") {
					part = strings.TrimSpace(part)
					if strings.HasPrefix(part, "rejected") {
						ex.rejected = append(ex.rejected, ruleIDPattern.FindAllString(part, -1)...)
					}
				}
				inReal = false
			case strings.HasPrefix(text, "on a real cluster:"):
				inReal = true
				real = append(real, strings.TrimSpace(strings.TrimPrefix(text, "on a real cluster:")))
			case inReal:
				real = append(real, text)
			}
		}
		ex.realLine = strings.Join(real, " ")
		if len(ex.rejected) > 0 && ex.realLine == "" {
			return nil, fmt.Errorf("%s: a \"# shepherd: rejected\" line without \"# on a real cluster:\"", f)
		}
		out = append(out, ex)
	}
	return out, nil
}

// readNotes reads docs/rules-notes.yaml strictly.
func readNotes() (map[string]note, error) {
	b, err := os.ReadFile(notesFile)
	if err != nil {
		return nil, err
	}
	notes := map[string]note{}
	if err := yaml.UnmarshalStrict(b, &notes); err != nil {
		return nil, fmt.Errorf("%s: %w", notesFile, err)
	}
	return notes, nil
}

// Generate builds docs/rules.md.
func Generate() ([]byte, error) {
	rules, err := ListRules()
	if err != nil {
		return nil, err
	}
	library, err := celrules.BuiltinRules()
	if err != nil {
		return nil, err
	}
	lib := map[string]celrules.Rule{}
	for _, r := range library {
		lib[r.ID] = r
	}
	files, err := ruleFiles()
	if err != nil {
		return nil, err
	}
	cases, err := runSuites()
	if err != nil {
		return nil, err
	}
	examples, err := invalidExamples()
	if err != nil {
		return nil, err
	}
	notes, err := readNotes()
	if err != nil {
		return nil, err
	}

	// Every rule has its note, and every note a rule.
	listed := map[string]bool{}
	var problems []string
	for _, r := range rules {
		listed[r.ID] = true
		n, ok := notes[r.ID]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: no entry (add why and fix)", r.ID))
		case strings.TrimSpace(n.Why) == "" || strings.TrimSpace(n.Fix) == "":
			problems = append(problems, fmt.Sprintf("%s: why and fix are required", r.ID))
		}
	}
	for id := range notes {
		if !listed[id] {
			problems = append(problems, fmt.Sprintf("%s: `shepherd export rules` does not list this rule (remove or rename the entry)", id))
		}
	}
	for _, ex := range examples {
		for _, id := range ex.rejected {
			if !listed[id] {
				problems = append(problems, fmt.Sprintf("%s names %s, which `shepherd export rules` does not list", ex.file, id))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%s:\n  %s", notesFile, strings.Join(problems, "\n  "))
	}

	var b strings.Builder
	writeHeader(&b, rules)
	for _, r := range rules {
		ex, err := pickExample(r, notes[r.ID], cases)
		if err != nil {
			return nil, err
		}
		if err := writeRule(&b, r, lib, files, ex, examples, notes[r.ID]); err != nil {
			return nil, err
		}
	}
	return []byte(b.String()), nil
}

// rel is a repository path as a link from docs/.
func rel(path string) string { return "../" + path }

func writeHeader(b *strings.Builder, rules []celrules.RuleInfo) {
	b.WriteString(`<!-- Generated by make docs (hack/gen-rules-doc): do not edit. Edit the rules, their suites or docs/rules-notes.yaml, then run make docs. -->

# Rules reference

Every rule ` + "`shepherd export rules`" + ` lists, one section each. A rule's
ID appears in every violation it reports: in the message kubectl prints,
in ` + "`shepherd check`" + ` and ` + "`shepherd test`" + `, in the logs, in Events and in
` + "`/audit`" + `. IDs starting with ` + "`V-`" + ` validate (deny or warn); IDs starting with
` + "`D-`" + ` set defaults (the mutating webhook).

Each section says what the rule checks, why it exists, an object it
denies (taken from the rules' own test suites in
[celrules/rules/tests](../celrules/rules/tests), with the answer shepherd
gives today), how to fix such an object, and who rejects it on a real
cluster. "On a real cluster" matters because the upstream projects check
some of the same things in their CRD schemas or webhooks; those run
first or in parallel, and the apiserver shows the first denial. See
[concepts.md](concepts.md) for the carriers (` + "`shepherd.dev/`" + ` annotations)
many rules read, and each rule's file (beside its integration, under
[integrations](../integrations)) for its expressions.

This page is generated by ` + "`make docs`" + ` from ` + "`shepherd export rules`" + `, the rule
library, its test suites, the headers of
[examples/invalid](../examples/invalid) and the hand-written
[rules-notes.yaml](rules-notes.yaml); ` + "`make verify`" + ` fails when it is stale.

| ID | Kinds | Action | What it checks |
|---|---|---|---|
`)
	for _, r := range rules {
		fmt.Fprintf(b, "| [%s](#%s) | %s | %s | %s |\n", r.ID, strings.ToLower(r.ID), strings.Join(r.Kinds, ", "), r.Action, r.Description)
	}
}

// example is the case a section shows.
type example struct {
	*suiteCase
	mine   []violation // the rule's violations in the answer
	others []string    // other rules the object breaks
}

// pickExample chooses the case of the rules' suites that shows rule r
// best: for a Deny or Warn rule, a case whose answer holds a violation of
// r; for a default, a case that covers r and asserts defaults. It
// prefers the upstream schemas, CREATE, fewer other violations and a
// shorter object. A note's Example names the case instead.
func pickExample(r celrules.RuleInfo, n note, cases []*suiteCase) (*example, error) {
	isDefault := r.Action == "Default"
	fits := func(sc *suiteCase) *example {
		ex := &example{suiteCase: sc}
		for _, v := range sc.got {
			if v.Rule == r.ID {
				ex.mine = append(ex.mine, v)
			} else if !slices.Contains(ex.others, v.Rule) {
				ex.others = append(ex.others, v.Rule)
			}
		}
		if isDefault {
			if !slices.Contains(sc.c.Covers, r.ID) || (len(sc.c.Expect.Defaults) == 0 && sc.c.Expect.Object == nil) {
				return nil
			}
			return ex
		}
		if len(ex.mine) == 0 {
			return nil
		}
		return ex
	}
	if n.Example != "" {
		file, name, _ := strings.Cut(n.Example, "#")
		for _, sc := range cases {
			if sc.file == file && sc.c.Name == name {
				if ex := fits(sc); ex != nil {
					return ex, nil
				}
				return nil, fmt.Errorf("%s: %s's example %s does not show it (no violation of it, or no defaults)", notesFile, r.ID, n.Example)
			}
		}
		return nil, fmt.Errorf("%s: %s's example %s: no such case in %s", notesFile, r.ID, n.Example, suitesDir)
	}
	var best *example
	var bestScore []int
	for _, sc := range cases {
		ex := fits(sc)
		if ex == nil {
			continue
		}
		nonNull := 0
		for _, d := range sc.c.Expect.Defaults {
			if d.Value != nil {
				nonNull++
			}
		}
		score := []int{
			b2i(isDefault && nonNull == 0),
			b2i(len(sc.suite.CRDs) > 0),
			b2i(sc.suite.NoWorkloadAPI && r.ID != "V-TR-7"),
			b2i(sc.c.OldObject != nil),
			len(ex.others),
			objectLines(sc.c.Object) + objectLines(sc.c.OldObject),
		}
		if best == nil || slices.Compare(score, bestScore) < 0 {
			best, bestScore = ex, score
		}
	}
	return best, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func objectLines(o *policytest.Object) int {
	if o == nil {
		return 0
	}
	return strings.Count(renderObject(o), "\n")
}

func renderObject(o *policytest.Object) string {
	s, err := compactYAML(o.Object, snippetWidth)
	if err != nil {
		return fmt.Sprintf("# cannot render: %v\n", err)
	}
	return s
}

// snippetWidth is the widest line a YAML snippet should have.
const snippetWidth = 80

// sentence ends s with a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") {
		return s
	}
	return s + "."
}

func writeRule(b *strings.Builder, r celrules.RuleInfo, lib map[string]celrules.Rule, files map[string]string, ex *example, examples []invalidExample, n note) error {
	fmt.Fprintf(b, "\n## %s\n\n", r.ID)

	// Facts from the listing and the library.
	fmt.Fprintf(b, "- Kinds: %s\n", strings.Join(r.Kinds, ", "))
	fmt.Fprintf(b, "- Action: %s\n", r.Action)
	switch {
	case r.Source == celrules.SourceBuiltin && files[r.ID] != "":
		fmt.Fprintf(b, "- Source: a built-in CEL rule in [%s](%s)\n", files[r.ID], rel(files[r.ID]))
	case r.Source == celrules.SourceBuiltin && r.Action == "Default":
		b.WriteString("- Source: a built-in MutatingAdmissionPolicy its integration defines (`Defaults`, under [integrations](../integrations)), which the webhook and `shepherd check` run in-process ([celrules/defaulting.go](../celrules/defaulting.go))\n")
	case r.Source == celrules.SourceGo && r.Action == "Default":
		b.WriteString("- Source: a default written in Go by its integration, under [integrations](../integrations) (it needs lookups)\n")
	case r.Source == celrules.SourceGo:
		b.WriteString("- Source: a check written in Go by its integration, under [integrations](../integrations) (it needs lookups or discovery)\n")
	default:
		fmt.Fprintf(b, "- Source: %s\n", r.Source)
	}
	if rule, ok := lib[r.ID]; ok {
		var ops []string
		for _, res := range rule.Match.Resources {
			for _, op := range res.Operations {
				if !slices.Contains(ops, string(op)) {
					ops = append(ops, string(op))
				}
			}
		}
		if len(ops) > 0 {
			fmt.Fprintf(b, "- Operations: %s\n", strings.Join(ops, ", "))
		}
		if len(rule.MatchConditions) > 0 {
			var names []string
			for _, mc := range rule.MatchConditions {
				names = append(names, "`"+mc.Name+"`")
			}
			fmt.Fprintf(b, "- Applies only when its match conditions hold: %s\n", strings.Join(names, ", "))
		}
	}
	switch {
	case r.Exportable && r.Action == "Default":
		b.WriteString("- Exported: as a MutatingAdmissionPolicy (`shepherd export map`); in native mode the apiserver applies it\n")
	case r.Exportable:
		b.WriteString("- Exported: as a ValidatingAdmissionPolicy (`shepherd export vap`); in native mode the apiserver runs it\n")
	default:
		fmt.Fprintf(b, "- Exported: no — %s; it stays with shepherd's webhook in both admission modes\n", r.Reason)
	}
	fmt.Fprintf(b, "- Judges an UPDATE that changes: %s\n", r.OnUpdate)
	if !r.Enabled {
		b.WriteString("- Enabled: no (switched off in this build's defaults)\n")
	}
	if r.Inactive != "" {
		fmt.Fprintf(b, "- Inactive against the pinned schemas: %s\n", r.Inactive)
	}
	if r.EnforcedUpstream != "" {
		fmt.Fprintf(b, "- Enforced upstream: %s. `shepherd serve` leaves it there (inactive, listed in `/status`; `--defer-to-upstream=false` judges it anyway); `check` still judges it\n", r.EnforcedUpstream)
	}

	label := "What it checks"
	if r.Action == "Default" {
		label = "What it does"
	}
	fmt.Fprintf(b, "\n**%s:** %s", label, sentence(r.Description))
	if n.Checks != "" {
		fmt.Fprintf(b, " %s", strings.TrimSpace(n.Checks))
	}
	b.WriteString("\n\n")
	fmt.Fprintf(b, "**Why:** %s\n\n", strings.TrimSpace(n.Why))

	writeExample(b, r, ex)

	fmt.Fprintf(b, "**How to fix:** %s\n\n", strings.TrimSpace(n.Fix))

	b.WriteString("**Who enforces it on a real cluster:**")
	var said bool
	if n.Layer != "" {
		fmt.Fprintf(b, " %s", strings.TrimSpace(n.Layer))
		said = true
	}
	var lines []string
	for _, e := range examples {
		if slices.Contains(e.rejected, r.ID) {
			lines = append(lines, fmt.Sprintf("[%s](%s) (shepherd rejects it with %s): %s", filepath.Base(e.file), rel(e.file), strings.Join(e.rejected, ", "), sentence(e.realLine)))
		}
	}
	if len(lines) > 0 {
		b.WriteString(" The header of the invalid example says, and test/bed checks it on a real cluster:\n\n")
		for _, l := range lines {
			fmt.Fprintf(b, "- %s\n", l)
		}
		said = true
	} else {
		b.WriteString("\n")
	}
	if !said {
		b.WriteString("Not recorded.\n")
	}
	return nil
}

func writeExample(b *strings.Builder, r celrules.RuleInfo, ex *example) {
	switch {
	case ex == nil && r.Action == "Default":
		b.WriteString("**An object it denies:** — (a default denies nothing)\n\n")
		return
	case ex == nil:
		b.WriteString("**An object it denies:** — (no case of the rules' suites shows one)\n\n")
		return
	}
	sc := ex.suiteCase
	where := fmt.Sprintf("case `%s` of [%s](%s)", sc.c.Name, filepath.Base(sc.file), rel(sc.file))
	var conditions []string
	if len(sc.suite.CRDs) > 0 {
		var dirs []string
		for _, p := range sc.suite.CRDs {
			dirs = append(dirs, "`"+filepath.ToSlash(filepath.Clean(p.Resolved))+"`")
		}
		conditions = append(conditions, "judged against the CRDs in "+strings.Join(dirs, ", ")+", not the upstream ones")
	}
	if sc.suite.NoWorkloadAPI {
		conditions = append(conditions, "on a cluster that does not serve the Workload API")
	}
	if r.Source == celrules.SourceGo && !r.Exportable && len(sc.suite.Context) > 0 { // a lookup
		var ctx []string
		for _, p := range sc.suite.Context {
			f := filepath.ToSlash(filepath.Clean(p.Resolved))
			ctx = append(ctx, fmt.Sprintf("[%s](%s)", filepath.Base(f), rel(f)))
		}
		conditions = append(conditions, "its lookups see the objects of "+strings.Join(ctx, ", "))
	}
	cond := ""
	if len(conditions) > 0 {
		cond = "; " + strings.Join(conditions, "; ")
	}

	update := sc.c.OldObject != nil
	switch {
	case r.Action == "Default":
		b.WriteString("**An object it denies:** — (a default denies nothing)\n\n")
		fmt.Fprintf(b, "**What it writes** (%s%s). Submitted:\n\n", where, cond)
	case r.Action == "Warn":
		fmt.Fprintf(b, "**An object it warns on** (%s%s)", where, cond)
	default:
		fmt.Fprintf(b, "**An object it denies** (%s%s)", where, cond)
	}
	if r.Action != "Default" {
		if update {
			b.WriteString(". An UPDATE of the stored object:\n\n")
		} else {
			b.WriteString(":\n\n")
		}
	}
	if update {
		fmt.Fprintf(b, "```yaml\n# stored\n%s---\n# submitted\n%s```\n\n", renderObject(sc.c.OldObject), renderObject(sc.c.Object))
	} else {
		fmt.Fprintf(b, "```yaml\n%s```\n\n", renderObject(sc.c.Object))
	}

	if r.Action == "Default" {
		b.WriteString("After defaulting (the values the suite asserts, by field path; `null`: absent):\n\n```yaml\n")
		b.WriteString(renderDefaults(sc.c.Expect.Defaults))
		if sc.c.Expect.Object != nil {
			y, err := compactYAML(sc.c.Expect.Object.V, snippetWidth)
			if err != nil {
				y = fmt.Sprintf("# cannot render: %v\n", err)
			}
			fmt.Fprintf(b, "# the object then contains:\n%s", y)
		}
		b.WriteString("```\n\n")
		if len(sc.warnings) > 0 {
			b.WriteString("With the admission warning:\n\n```\n")
			for _, w := range sc.warnings {
				fmt.Fprintf(b, "%s\n", w)
			}
			b.WriteString("```\n\n")
		}
		return
	}
	b.WriteString("shepherd answers:\n\n```\n")
	for _, v := range ex.mine {
		field := v.Field
		if field == "" {
			field = "(the object)"
		}
		fmt.Fprintf(b, "%-5s %s: %s\n", strings.ToLower(v.Action), field, celrules.Named(v.Rule, v.Message))
	}
	b.WriteString("```\n\n")
	if len(ex.others) > 0 {
		fmt.Fprintf(b, "The same object also breaks %s.\n\n", strings.Join(ex.others, ", "))
	}
}

// renderDefaults renders expected defaults as a YAML map of field path
// to value, in the suite's order.
func renderDefaults(defaults policytest.Defaults) string {
	m := &yamlv3.Node{Kind: yamlv3.MappingNode}
	for _, d := range defaults {
		var v yamlv3.Node
		if err := v.Encode(d.Value); err != nil {
			return fmt.Sprintf("# cannot render: %v\n", err)
		}
		m.Content = append(m.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Value: d.Path}, &v)
	}
	compactChildren(m, 0, 1000)
	var buf bytes.Buffer
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(m); err != nil {
		return fmt.Sprintf("# cannot render: %v\n", err)
	}
	_ = enc.Close()
	return buf.String()
}

// compactYAML renders v as YAML the way the suites are written: block
// style, except that a map or list whose flow form fits on its line
// (width columns in all) is written in flow style.
func compactYAML(v any, width int) (string, error) {
	var n yamlv3.Node
	if err := n.Encode(v); err != nil {
		return "", err
	}
	if n.Kind == yamlv3.MappingNode {
		compactChildren(&n, 0, width)
	}
	var buf bytes.Buffer
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// compactNode makes n flow style when its flow form, starting at column
// start, fits in width; else it stays block style with its content at
// column indent, and its children are tried.
func compactNode(n *yamlv3.Node, start, indent, width int) {
	if n.Kind != yamlv3.MappingNode && n.Kind != yamlv3.SequenceNode {
		return
	}
	setStyle(n, yamlv3.FlowStyle)
	if b, err := yamlv3.Marshal(n); err == nil {
		flow := strings.TrimSpace(string(b))
		if !strings.Contains(flow, "\n") && start+len(flow) <= width {
			return
		}
	}
	setStyle(n, 0)
	compactChildren(n, indent, width)
}

// compactChildren tries the children of the block node n whose content
// is at column indent: a map's values follow "key: ", a list's items
// follow "- " (yaml.v3 indents both by 2).
func compactChildren(n *yamlv3.Node, indent, width int) {
	switch n.Kind {
	case yamlv3.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			compactNode(n.Content[i], indent+len(n.Content[i-1].Value)+2, indent+2, width)
		}
	case yamlv3.SequenceNode:
		for _, c := range n.Content {
			compactNode(c, indent+2, indent+2, width)
		}
	}
}

// setStyle sets the style of n and of every map and list below it.
func setStyle(n *yamlv3.Node, s yamlv3.Style) {
	if n.Kind == yamlv3.MappingNode || n.Kind == yamlv3.SequenceNode {
		n.Style = s
	}
	for _, c := range n.Content {
		setStyle(c, s)
	}
}
