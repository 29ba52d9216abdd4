package policytest

import (
	"fmt"
	"strconv"
	"strings"
)

// fieldPath is a parsed field path: map keys (string) and list indexes
// (int), in the syntax violations name fields with:
// spec.template.cliques[0].spec.minAvailable,
// metadata.annotations['shepherd.dev/max-restarts'].
type fieldPath []any

// parseFieldPath parses a field path. Keys are separated by dots; [N]
// indexes a list; ['key'] or ["key"] is a key with dots or slashes.
func parseFieldPath(s string) (fieldPath, error) {
	if s == "" {
		return nil, fmt.Errorf("an empty field path; write e.g. spec.template.terminationDelay")
	}
	bad := func(i int, why string) error {
		return fmt.Errorf("field path %q, at character %d: %s (paths look like spec.cliques[0].name or metadata.annotations['shepherd.dev/max-restarts'])", s, i+1, why)
	}
	var out fieldPath
	i := 0
	expectKey := true // at the start or after a dot: a key must follow
	for i < len(s) {
		switch c := s[i]; {
		case c == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, bad(i, "[ without ]")
			}
			inner := s[i+1 : i+end]
			if len(inner) >= 2 && (inner[0] == '\'' || inner[0] == '"') {
				if inner[len(inner)-1] != inner[0] {
					return nil, bad(i, "unterminated quoted key")
				}
				out = append(out, inner[1:len(inner)-1])
			} else {
				n, err := strconv.Atoi(inner)
				if err != nil || n < 0 {
					return nil, bad(i, "an index is a number, a key is quoted: [0] or ['key']")
				}
				out = append(out, n)
			}
			i += end + 1
			expectKey = false
		case c == '.':
			if expectKey {
				return nil, bad(i, "an empty key")
			}
			i++
			expectKey = true
			if i == len(s) {
				return nil, bad(i-1, "a trailing dot")
			}
		default:
			if !expectKey {
				return nil, bad(i, "a key follows a dot")
			}
			end := strings.IndexAny(s[i:], ".[")
			if end < 0 {
				end = len(s) - i
			}
			out = append(out, s[i:i+end])
			i += end
			expectKey = false
		}
	}
	return out, nil
}

// lookup finds the value at p in v.
func (p fieldPath) lookup(v any) (any, bool) {
	for _, seg := range p {
		switch k := seg.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[k]; !ok {
				return nil, false
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil, false
			}
			v = l[k]
		}
	}
	return v, true
}

// Lookup finds the value at the default's path in obj.
func (d Default) Lookup(obj map[string]any) (any, bool) {
	return d.path.lookup(anyMap(obj))
}
