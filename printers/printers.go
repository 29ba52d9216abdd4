// Package printers renders the reports of shepherd's commands: check's
// verdicts, audit's ring and audit --policy's impact, export rules' list,
// as text tables for people and as JSON or YAML for scripts. JSON and YAML
// are indented like json.MarshalIndent and block-style YAML down to a
// depth, and written on one line below it, so a deeply nested object in a
// report (check prints the objects it judged) cannot make the output grow
// with the square of its depth.
package printers

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// JSON writes v as indented JSON and a newline.
func JSON(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	indentJSON(&buf, b, maxIndentDepth)
	buf.WriteByte('\n')
	_, err = out.Write(buf.Bytes())
	return err
}

// maxIndentDepth is how deep JSON and YAML indent. Down to it the
// output is that of json.MarshalIndent and a block-style YAML document;
// deeper values are written on one line (compact JSON, YAML flow style).
// Indenting every level would make a deeply nested object's output grow
// with the square of its depth (5,000 levels: 50 MB from 30 kB); real
// objects are about 20 levels deep.
const maxIndentDepth = 32

// indentJSON appends compact JSON src to dst, indented by two spaces per
// level down to maxDepth.
func indentJSON(dst *bytes.Buffer, src []byte, maxDepth int) {
	depth := 0
	open := false // a container was just opened: newline before its first element
	inString, escaped := false, false
	newline := func(d int) {
		dst.WriteByte('\n')
		for range d {
			dst.WriteString("  ")
		}
	}
	for _, c := range src {
		if inString {
			dst.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if open && c != '}' && c != ']' {
			open = false
			newline(depth)
		}
		switch c {
		case '"':
			inString = true
			dst.WriteByte(c)
		case '{', '[':
			dst.WriteByte(c)
			depth++
			open = depth <= maxDepth
		case '}', ']':
			if open {
				open = false // empty: {} or [], as json.Indent writes them
			} else if depth <= maxDepth {
				newline(depth - 1)
			}
			depth--
			dst.WriteByte(c)
		case ',':
			dst.WriteByte(c)
			if depth <= maxDepth {
				newline(depth)
			}
		case ':':
			dst.WriteByte(c)
			if depth <= maxDepth {
				dst.WriteByte(' ')
			}
		default:
			dst.WriteByte(c)
		}
	}
}

// YAML writes v (its JSON form) as YAML: block style down to
// maxIndentDepth, flow style below, keys sorted as sigs.k8s.io/yaml sorts
// them, numbers as JSON wrote them.
func YAML(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return err
	}
	enc := yamlv3.NewEncoder(out)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(yamlNode(generic, 0)); err != nil {
		return err
	}
	return enc.Close()
}

// yamlNode builds the YAML node of a value decoded from JSON with
// UseNumber, at depth.
func yamlNode(v any, depth int) *yamlv3.Node {
	var style yamlv3.Style
	if depth >= maxIndentDepth {
		style = yamlv3.FlowStyle
	}
	switch v := v.(type) {
	case map[string]any:
		n := &yamlv3.Node{Kind: yamlv3.MappingNode, Style: style}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			n.Content = append(n.Content, yamlString(k), yamlNode(v[k], depth+1))
		}
		return n
	case []any:
		n := &yamlv3.Node{Kind: yamlv3.SequenceNode, Style: style}
		for _, e := range v {
			n.Content = append(n.Content, yamlNode(e, depth+1))
		}
		return n
	case string:
		return yamlString(v)
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(v), ".eE") {
			tag = "!!float"
		}
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: tag, Value: string(v)}
	case bool:
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	default: // nil
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!null", Value: "null"}
	}
}

// yamlString is the node of a string, a map key's as a value's: quoted
// where a YAML 1.1 reader would read the plain scalar as something else (a
// label key "n" would come back as the boolean false).
func yamlString(s string) *yamlv3.Node {
	n := &yamlv3.Node{}
	n.SetString(s)
	if yaml11Bool.MatchString(s) || yaml11Sexagesimal.MatchString(s) {
		n.Style = yamlv3.DoubleQuotedStyle
	}
	return n
}

// Plain scalars that YAML 1.1 readers (sigs.k8s.io/yaml, kubectl) read as a
// boolean or a base-60 number while YAML 1.2 reads them as strings: such a
// string is quoted, so every reader gets the string back.
var (
	yaml11Bool        = regexp.MustCompile(`^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$`)
	yaml11Sexagesimal = regexp.MustCompile(`^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`)
)
