package policytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// APIVersion and Kind head every suite file. They version the file
// format; no cluster serves them.
const (
	APIVersion = "shepherd.dev/v1alpha1"
	Kind       = "PolicyTest"
)

// Suite is one suite file: the chain it runs against (policies, context,
// cluster traits) and its cases.
type Suite struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Name names the suite in reports; default: the file's path.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Description is free text for readers of the suite.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Policies are WorkloadPolicy (and PolicyException) files or directories, relative to the
	// suite file, added to the built-in rules (which are always on).
	Policies []Path `yaml:"policies,omitempty" json:"policies,omitempty"`
	// Context are files or directories of objects the lookups see
	// (runtimes, the TrainJob owning a JobSet, the PodCliqueSet owning a
	// PodClique, Namespaces), relative to the suite file.
	Context []Path `yaml:"context,omitempty" json:"context,omitempty"`
	// CRDs are CRD files or directories, relative to the suite file, whose
	// schemas the suite judges against (check's --crd): the CRDs of the
	// target cluster. Default: the command's --crd, else the pinned
	// upstream CRDs built into shepherd.
	CRDs []Path `yaml:"crds,omitempty" json:"crds,omitempty"`
	// NoWorkloadAPI judges as if the cluster did not serve the Workload API
	// (shepherd check --no-workload-api).
	NoWorkloadAPI bool `yaml:"noWorkloadAPI,omitempty" json:"noWorkloadAPI,omitempty"`
	// FieldValidation is Strict (default) or Warn, as check's
	// --field-validation: whether fields the schema lacks deny the object.
	FieldValidation string `yaml:"fieldValidation,omitempty" json:"fieldValidation,omitempty"`
	Cases           []Case `yaml:"cases" json:"cases"`

	// File is the suite file as given (discovered or named).
	File string `yaml:"-" json:"file"`
}

// DisplayName is Name, or the file when the suite has no name.
func (s *Suite) DisplayName() string {
	if s.Name != "" {
		return s.Name
	}
	return s.File
}

// Case is one object admitted through the chain and what must come out.
type Case struct {
	// Name is unique within the suite.
	Name string `yaml:"name" json:"name"`
	// Covers lists the rule IDs the case exercises (informational: reports
	// and coverage checks read it; the expectation is Expect).
	Covers []string `yaml:"covers,omitempty" json:"covers,omitempty"`
	// Operation is CREATE or UPDATE; default UPDATE with an old object,
	// else CREATE.
	Operation string `yaml:"operation,omitempty" json:"operation,omitempty"`
	// Object (inline) or ObjectFile (one object, relative to the suite) is
	// the object admitted, as the user submits it.
	Object     *Object `yaml:"object,omitempty" json:"object,omitempty"`
	ObjectFile *Path   `yaml:"objectFile,omitempty" json:"objectFile,omitempty"`
	// OldObject or OldObjectFile is the stored object of an UPDATE.
	OldObject     *Object `yaml:"oldObject,omitempty" json:"oldObject,omitempty"`
	OldObjectFile *Path   `yaml:"oldObjectFile,omitempty" json:"oldObjectFile,omitempty"`
	Expect        Expect  `yaml:"expect" json:"expect"`

	// Line is the case's line in its suite file.
	Line int `yaml:"-" json:"line"`
}

// Expect is the expected result of a case.
type Expect struct {
	// Allowed is the verdict; required.
	Allowed *bool `yaml:"allowed" json:"allowed"`
	// Violations is the exact set of violations (Deny, Warn and Audit),
	// each matched by rule and field; none when omitted.
	Violations []ExpectedViolation `yaml:"violations,omitempty" json:"violations,omitempty"`
	// Warnings are substrings, each matching one admission warning. Every
	// warning must be matched, except those that render a Warn violation
	// (Violations already expects them).
	Warnings []string `yaml:"warnings,omitempty" json:"warnings,omitempty"`
	// Defaults are values of the object after defaulting, by field path;
	// a null value means the field is absent.
	Defaults Defaults `yaml:"defaults,omitempty" json:"defaults,omitempty"`
	// Object is a partial object the object after defaulting must contain:
	// every field it gives, with that value (a null: the field is absent);
	// lists element by element, of the same length.
	Object *Value `yaml:"object,omitempty" json:"object,omitempty"`
}

// ExpectedViolation is one expected violation.
type ExpectedViolation struct {
	// Rule is the rule ID (V-TJ-1) or a WorkloadPolicy's rule name; required.
	Rule string `yaml:"rule" json:"rule"`
	// Field is the field path the violation names, exactly; omitted for a
	// violation of the object as a whole.
	Field string `yaml:"field,omitempty" json:"field,omitempty"`
	// Message, when given, is a substring of the violation's message.
	Message string `yaml:"message,omitempty" json:"message,omitempty"`
	// Action, when given, is Deny, Warn or Audit, or Exempt for a violation
	// a PolicyException of the suite's policies exempts.
	Action string `yaml:"action,omitempty" json:"action,omitempty"`
}

// Path is a file path in a suite, resolved against the suite's directory,
// with the line it was written on.
type Path struct {
	// Path is as written in the suite.
	Path string
	// Resolved is Path relative to the suite's directory.
	Resolved string
	Line     int
}

// UnmarshalYAML reads a path: a non-empty string.
func (p *Path) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" || n.Value == "" {
		return typeError(n, "want a file path (a non-empty string)")
	}
	p.Path, p.Line = n.Value, n.Line
	return nil
}

// MarshalJSON writes the path as written.
func (p Path) MarshalJSON() ([]byte, error) { return json.Marshal(p.Path) }

// Object is a Kubernetes object of a suite, read as kubectl reads a
// manifest (YAML 1.1 scalars, integers as int64).
type Object struct {
	unstructured.Unstructured
	// Line is where the object starts: in the suite, or in its file.
	Line int `json:"-"`
	// File is the file the object was read from (the suite or an
	// objectFile).
	File string `json:"-"`
}

// UnmarshalYAML reads an inline object.
func (o *Object) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return typeError(n, "want an object (a mapping with apiVersion, kind, metadata, ...)")
	}
	v, err := nodeValue(n)
	if err != nil {
		return typeError(n, err.Error())
	}
	m, _ := v.(map[string]any)
	if err := checkTypeMeta(m); err != nil {
		return typeError(n, err.Error())
	}
	o.Object, o.Line = m, n.Line
	return nil
}

// MarshalJSON writes the object.
func (o *Object) MarshalJSON() ([]byte, error) { return o.Unstructured.MarshalJSON() }

// Value is any YAML value, read as kubectl reads manifests (so that it
// compares equal to what an object holds).
type Value struct {
	V    any
	Line int
}

// UnmarshalYAML reads the value.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	x, err := nodeValue(n)
	if err != nil {
		return typeError(n, err.Error())
	}
	v.V, v.Line = x, n.Line
	return nil
}

// MarshalJSON writes the value.
func (v Value) MarshalJSON() ([]byte, error) { return json.Marshal(v.V) }

// Default is one expected value of the defaulted object.
type Default struct {
	Path  string
	Value any
	Line  int

	path fieldPath
}

// Defaults are expected values by field path, in the order written.
type Defaults []Default

// UnmarshalYAML reads a mapping of field path to value.
func (d *Defaults) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return typeError(n, `want a mapping of field path to value, e.g. {"spec.template.terminationDelay": 0s}`)
	}
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p, err := parseFieldPath(k.Value)
		if err != nil {
			errs = append(errs, fmt.Sprintf("line %d: defaults: %v", k.Line, err))
			continue
		}
		x, err := nodeValue(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("line %d: defaults %s: %v", v.Line, k.Value, err))
			continue
		}
		*d = append(*d, Default{Path: k.Value, Value: x, Line: k.Line, path: p})
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// MarshalJSON writes the defaults as a JSON object.
func (d Defaults) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(d))
	for _, e := range d {
		m[e.Path] = e.Value
	}
	return json.Marshal(m)
}

func typeError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}

// nodeValue converts a YAML node to the value kubectl would read from the
// same text: it is written back out and read with sigs.k8s.io/yaml, the
// reader of kubectl and `shepherd check`.
func nodeValue(n *yaml.Node) (any, error) {
	b, err := yaml.Marshal(n)
	if err != nil {
		return nil, err
	}
	js, err := sigsyaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(js)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normalize(v), nil
}

// normalize turns JSON numbers into int64 when whole, else float64, as
// apimachinery decodes them, so expected values compare equal to objects.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	}
	return v
}

func checkTypeMeta(m map[string]any) error {
	av, _ := m["apiVersion"].(string)
	k, _ := m["kind"].(string)
	switch {
	case av == "" && k == "":
		return errors.New("the object has neither apiVersion nor kind; add both, e.g. apiVersion: trainer.kubeflow.org/v1alpha1 and kind: TrainJob")
	case av == "":
		return fmt.Errorf("the object (kind %s) has no apiVersion; add it", k)
	case k == "":
		return fmt.Errorf("the object (apiVersion %s) has no kind; add it", av)
	}
	return nil
}

// Error is a suite that cannot be loaded: the file, the line and what to
// fix.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

var (
	errLine        = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unknownField   = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	cannotDecode   = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
	yamlErrorLines = regexp.MustCompile(`line (\d+)`)
)

// types describes the suite's Go types for messages: what the YAML is and
// which keys it has.
var types = map[string]struct {
	what string
	of   reflect.Type
}{
	"policytest.Suite":             {"a suite", reflect.TypeFor[Suite]()},
	"policytest.Case":              {"a case", reflect.TypeFor[Case]()},
	"policytest.Expect":            {"expect", reflect.TypeFor[Expect]()},
	"policytest.ExpectedViolation": {"a violation", reflect.TypeFor[ExpectedViolation]()},
}

// keys lists the YAML keys of a struct type.
func keys(t reflect.Type) string {
	var out []string
	for i := range t.NumField() {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return strings.Join(out, ", ")
}

var goTypes = map[string]string{
	"bool":                           "true or false",
	"*bool":                          "true or false",
	"string":                         "a string",
	"[]string":                       "a list of strings",
	"[]policytest.Case":              "a list of cases",
	"[]policytest.Path":              "a list of file paths",
	"[]policytest.ExpectedViolation": "a list of violations ({rule: ID, field: PATH})",
	"policytest.Suite":               "a mapping (apiVersion, kind, cases, ...)",
	"policytest.Case":                "a mapping (name, object, expect, ...)",
	"policytest.Expect":              "a mapping (allowed, violations, warnings, defaults, object)",
	"policytest.ExpectedViolation":   "a mapping (rule, field, message, action)",
}

// rewrite turns one message of go.yaml.in/yaml/v3 into "what to fix".
func rewrite(msg string) (int, string) {
	line := 0
	if m := errLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		if t, ok := types[m[2]]; ok {
			return line, fmt.Sprintf("unknown key %q in %s; its keys are: %s", m[1], t.what, keys(t.of))
		}
		return line, fmt.Sprintf("unknown key %q", m[1])
	}
	if m := cannotDecode.FindStringSubmatch(msg); m != nil {
		want, ok := goTypes[m[3]]
		if !ok {
			want = m[3]
		}
		got := map[string]string{"!!str": "a string", "!!int": "a number", "!!float": "a number", "!!bool": "a boolean", "!!seq": "a list", "!!map": "a mapping", "!!null": "null"}[m[1]]
		if got == "" {
			got = m[1]
		}
		if m[2] != "" && m[1] != "!!seq" && m[1] != "!!map" {
			got += " (" + m[2] + ")"
		}
		return line, fmt.Sprintf("want %s, got %s", want, got)
	}
	return line, msg
}

// Load reads and checks one suite file: the suite, its inline objects and
// object files, and that its policies and context exist. Every error
// names the file and line and says what to fix; all of them are returned
// (joined).
func Load(file string) (*Suite, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Msg: fmt.Sprintf("cannot read the suite: %v", err)}
	}
	s, err := Parse(file, b)
	if err != nil {
		return nil, err
	}
	var errs []error
	dir := filepath.Dir(file)
	resolve := func(p *Path, what string) {
		p.Resolved = p.Path
		if !filepath.IsAbs(p.Path) {
			p.Resolved = filepath.Join(dir, p.Path)
		}
		if _, err := os.Stat(p.Resolved); err != nil {
			errs = append(errs, &Error{File: file, Line: p.Line, Msg: fmt.Sprintf("%s %s: no such file or directory (paths are relative to the suite's directory, %s)", what, p.Path, dir)})
		}
	}
	for i := range s.Policies {
		resolve(&s.Policies[i], "policies:")
	}
	for i := range s.Context {
		resolve(&s.Context[i], "context:")
	}
	for i := range s.CRDs {
		resolve(&s.CRDs[i], "crds:")
	}
	for i := range s.Cases {
		c := &s.Cases[i]
		for _, f := range []struct {
			path *Path
			obj  **Object
			what string
		}{{c.ObjectFile, &c.Object, "objectFile"}, {c.OldObjectFile, &c.OldObject, "oldObjectFile"}} {
			if f.path == nil {
				continue
			}
			n := len(errs)
			resolve(f.path, fmt.Sprintf("case %q: %s", c.Name, f.what))
			if len(errs) > n {
				continue
			}
			o, err := readObjectFile(f.path.Resolved)
			if err != nil {
				errs = append(errs, &Error{File: file, Line: f.path.Line, Msg: fmt.Sprintf("case %q: %s: %v", c.Name, f.what, err)})
				continue
			}
			*f.obj = o
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// readObjectFile reads the one object of an objectFile.
func readObjectFile(file string) (*Object, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := syntaxCheck(file, b); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var objs []*Object
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s", yamlErr(file, err))
		}
		if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
			continue
		}
		o := &Object{File: file}
		if err := n.Content[0].Decode(o); err != nil {
			return nil, fmt.Errorf("%s", yamlErr(file, err))
		}
		objs = append(objs, o)
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s holds %d objects; an objectFile holds exactly one", file, len(objs))
	}
	return objs[0], nil
}

// yamlErr renders a YAML error of file as "file:line: what to fix".
func yamlErr(file string, err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var out []string
		for _, e := range te.Errors {
			line, msg := rewrite(e)
			out = append(out, (&Error{File: file, Line: line, Msg: msg}).Error())
		}
		return strings.Join(out, "\n")
	}
	line, msg := rewrite(err.Error())
	if line == 0 {
		if m := yamlErrorLines.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
	}
	return (&Error{File: file, Line: line, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}).Error()
}

// syntaxCheck reports a YAML syntax error of the (first) document of b
// at its line. go.yaml.in/yaml/v3 puts some syntax errors (an unclosed
// flow collection) one line early; the reader of kubectl and `shepherd
// check` names the line the collection starts on.
func syntaxCheck(file string, b []byte) error {
	if _, err := sigsyaml.YAMLToJSON(b); err != nil {
		line, msg := rewrite(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	}
	return nil
}

// Parse reads a suite from b (the contents of file) without touching the
// files it names: their paths are left unresolved.
func Parse(file string, b []byte) (*Suite, error) {
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if err := syntaxCheck(file, b); err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, errors.New(yamlErr(file, err))
	}
	if len(root.Content) == 0 {
		return nil, fail(0, "empty; a suite has apiVersion: %s, kind: %s and cases", APIVersion, Kind)
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, fail(doc.Line, "a suite is a mapping (apiVersion: %s, kind: %s, cases: [...])", APIVersion, Kind)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	s := &Suite{File: file}
	if err := dec.Decode(s); err != nil {
		return nil, errors.New(yamlErr(file, err))
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, fail(next.Line, "a second document: a suite file holds one suite; put the next suite in a file of its own")
	} else if !errors.Is(err, io.EOF) {
		return nil, errors.New(yamlErr(file, err))
	}

	var errs []error
	if s.APIVersion != APIVersion || s.Kind != Kind {
		errs = append(errs, fail(line(doc, "apiVersion", doc.Line), "a suite starts with apiVersion: %s and kind: %s (got %q and %q)", APIVersion, Kind, s.APIVersion, s.Kind))
	}
	switch s.FieldValidation {
	case "", "Strict", "Warn":
	default:
		errs = append(errs, fail(line(doc, "fieldValidation", doc.Line), "fieldValidation must be Strict or Warn, got %q", s.FieldValidation))
	}
	if len(s.Cases) == 0 {
		errs = append(errs, fail(line(doc, "cases", doc.Line), "the suite has no cases; add cases: [{name: ..., object: {...}, expect: {allowed: true}}]"))
	}
	var caseNodes []*yaml.Node
	if n := value(doc, "cases"); n != nil {
		caseNodes = n.Content
	}
	seen := map[string]int{}
	for i := range s.Cases {
		c := &s.Cases[i]
		if i < len(caseNodes) {
			c.Line = caseNodes[i].Line
		}
		cn := caseNodes[i]
		where := fmt.Sprintf("case %d", i+1)
		if c.Name != "" {
			where = fmt.Sprintf("case %q", c.Name)
		}
		caseFail := func(key, format string, args ...any) {
			errs = append(errs, fail(line(cn, key, c.Line), "%s: %s", where, fmt.Sprintf(format, args...)))
		}
		switch prev, dup := seen[c.Name]; {
		case c.Name == "":
			caseFail("name", "no name; add name: (unique within the suite)")
		case dup:
			caseFail("name", "the name is also that of the case at line %d; names are unique within a suite", prev)
		default:
			seen[c.Name] = c.Line
		}
		if c.Object != nil {
			c.Object.File = file
		}
		if c.OldObject != nil {
			c.OldObject.File = file
		}
		switch {
		case c.Object == nil && c.ObjectFile == nil:
			caseFail("name", "no object; add object: {...} (inline) or objectFile: FILE")
		case c.Object != nil && c.ObjectFile != nil:
			caseFail("objectFile", "both object and objectFile; keep one")
		}
		if c.OldObject != nil && c.OldObjectFile != nil {
			caseFail("oldObjectFile", "both oldObject and oldObjectFile; keep one")
		}
		hasOld := c.OldObject != nil || c.OldObjectFile != nil
		switch c.Operation {
		case "":
			c.Operation = "CREATE"
			if hasOld {
				c.Operation = "UPDATE"
			}
		case "CREATE":
			if hasOld {
				caseFail("operation", "operation CREATE with an oldObject; an oldObject makes the case an UPDATE (drop operation, or the old object)")
			}
		case "UPDATE":
			if !hasOld {
				caseFail("operation", "operation UPDATE needs oldObject or oldObjectFile (the stored object)")
			}
		default:
			caseFail("operation", "operation must be CREATE or UPDATE, got %q", c.Operation)
		}
		en := value(cn, "expect")
		if en == nil {
			caseFail("name", "no expect; add expect: {allowed: true|false, ...}")
			continue
		}
		if c.Expect.Allowed == nil {
			errs = append(errs, fail(en.Line, "%s: expect has no allowed; add allowed: true or allowed: false", where))
		}
		var vNodes []*yaml.Node
		if n := value(en, "violations"); n != nil {
			vNodes = n.Content
		}
		for j, v := range c.Expect.Violations {
			l := en.Line
			if j < len(vNodes) {
				l = vNodes[j].Line
			}
			if v.Rule == "" {
				errs = append(errs, fail(l, "%s: violation %d has no rule; add rule: (a rule ID such as V-TJ-1, or the WorkloadPolicy's name)", where, j+1))
			}
			switch v.Action {
			case "", "Deny", "Warn", "Audit", "Exempt":
			default:
				errs = append(errs, fail(l, "%s: violation %d: action must be Deny, Warn, Audit or Exempt (a PolicyException of policies: exempts it), got %q", where, j+1, v.Action))
			}
		}
		for j, w := range c.Expect.Warnings {
			if w == "" {
				errs = append(errs, fail(line(en, "warnings", en.Line), "%s: warning %d is empty; give a substring of the warning", where, j+1))
			}
		}
		if c.Expect.Object != nil {
			if _, ok := c.Expect.Object.V.(map[string]any); !ok {
				errs = append(errs, fail(c.Expect.Object.Line, "%s: expect.object must be a (partial) object, a mapping", where))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// value is the value node of key in mapping n, or nil.
func value(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// line is the line of key in mapping n, or def.
func line(n *yaml.Node, key string, def int) int {
	if n == nil || n.Kind != yaml.MappingNode {
		return def
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return def
}

// SuffixTest is how a suite file's name ends (also with .yml); Discover
// finds the files named so, e.g. shepherd-test.yaml or trainjob-test.yaml.
const SuffixTest = "-test.yaml"

// IsSuiteFile reports whether name is a suite file's name.
func IsSuiteFile(name string) bool {
	return strings.HasSuffix(name, SuffixTest) || strings.HasSuffix(name, "-test.yml")
}

// Discover expands paths into suite files. A file is a suite whatever its
// name; a directory is searched recursively for files named *-test.yaml
// (or *-test.yml), skipping directories named testdata or starting with
// "." or "_" below it (as the go tool does), so `shepherd test .` at the
// top of a repository runs its suites and not test fixtures. A directory
// without a suite is an error.
func Discover(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: no such file or directory", p)
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				name := d.Name()
				if path != p && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
					return filepath.SkipDir
				}
				return nil
			}
			if IsSuiteFile(d.Name()) {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("searching %s: %w", p, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no suite (a file named *%s) in this directory or below", p, SuffixTest)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}
