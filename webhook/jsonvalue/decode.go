// Package jsonvalue decodes a JSON document into the generic values
// apimachinery's decoder (sigs.k8s.io/json, case-sensitive, preserving
// integers) produces: map[string]any, []any, string, int64 for integers that
// fit, float64 for other numbers, bool and nil. It gives the same values and
// accepts exactly the same documents — a differential fuzz test holds it to
// that — but it is a direct recursive-descent parser, several times faster
// and with fewer allocations than the reflection-driven decoder, because
// decoding every admitted object is on shepherd's request path.
package jsonvalue

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays accepted, the limit
// of encoding/json: deeper documents are an error, never a stack overflow.
const MaxDepth = 10000

// SyntaxError is a malformed document, with the byte offset of the problem.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.Offset)
}

// Object decodes a document whose top-level value must be a JSON object.
// A top-level null is (nil, nil), as decoding null into a map gives.
func Object(data []byte) (map[string]any, error) {
	d := decoder{data: data}
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == 'n' {
		if err := d.literal("null"); err != nil {
			return nil, err
		}
		return nil, d.end()
	}
	if d.pos < len(d.data) && d.data[d.pos] != '{' {
		start := d.pos
		v, err := d.value(0)
		if err != nil {
			return nil, err
		}
		if err := d.end(); err != nil {
			return nil, err
		}
		return nil, &SyntaxError{Offset: start, msg: fmt.Sprintf("want a JSON object, got %s", KindOf(v))}
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// KindOf names the JSON type of a decoded value with its article ("an
// object", "a string", ..., "null"), for messages that say what was found.
func KindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return "null"
}

// Value decodes any JSON document.
func Value(data []byte) (any, error) {
	d := decoder{data: data}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	return v, d.end()
}

type decoder struct {
	data []byte
	pos  int
	// stack collects the elements of the arrays being decoded, so each
	// array is allocated once, at its final length.
	stack []any
	// arena, when set, supplies the maps and arrays.
	arena *Arena
}

func (d *decoder) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: d.pos, msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// end accepts only whitespace after the top-level value.
func (d *decoder) end() error {
	d.skipSpace()
	if d.pos < len(d.data) {
		return d.errorf("invalid character %q after the top-level value", d.data[d.pos])
	}
	return nil
}

func (d *decoder) value(depth int) (any, error) {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of JSON input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		if depth >= MaxDepth {
			return nil, d.errorf("exceeded max depth %d", MaxDepth)
		}
		return d.object(depth + 1)
	case c == '[':
		if depth >= MaxDepth {
			return nil, d.errorf("exceeded max depth %d", MaxDepth)
		}
		return d.array(depth + 1)
	case c == '"':
		return d.stringValue()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return nil, d.errorf("invalid character %q looking for the beginning of a value", c)
	}
}

func (d *decoder) literal(want string) error {
	if len(d.data)-d.pos < len(want) || string(d.data[d.pos:d.pos+len(want)]) != want {
		return d.errorf("invalid literal, expected %s", want)
	}
	d.pos += len(want)
	return nil
}

func (d *decoder) object(depth int) (map[string]any, error) {
	var m map[string]any
	if d.arena != nil {
		m = d.arena.newMap()
	} else {
		m = map[string]any{}
	}
	err := d.members(func(key string) error {
		v, err := d.value(depth)
		m[key] = v
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// members reads the object at d.pos, calling member for each key with d
// positioned at the key's value, which member must consume.
func (d *decoder) members(member func(key string) error) error {
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return nil
	}
	for {
		d.skipSpace()
		if d.pos >= len(d.data) {
			return d.errorf("unexpected end of JSON input")
		}
		if d.data[d.pos] != '"' {
			return d.errorf("invalid character %q looking for the beginning of an object key", d.data[d.pos])
		}
		key, err := d.symbol()
		if err != nil {
			return err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return d.errorf("unexpected end of JSON input")
		}
		if d.data[d.pos] != ':' {
			return d.errorf("invalid character %q after an object key", d.data[d.pos])
		}
		d.pos++
		if err := member(key); err != nil {
			return err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return d.errorf("unexpected end of JSON input")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.errorf("invalid character %q after an object value", d.data[d.pos])
		}
	}
}

func (d *decoder) array(depth int) ([]any, error) {
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return []any{}, nil
	}
	base := len(d.stack)
	defer func() { d.stack = d.stack[:base] }()
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.stack = append(d.stack, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			if d.arena != nil {
				return d.arena.newArray(d.stack[base:]), nil
			}
			return append([]any(nil), d.stack[base:]...), nil
		default:
			return nil, d.errorf("invalid character %q after an array element", d.data[d.pos])
		}
	}
}

// number scans a number with JSON's grammar, then converts it as
// sigs.k8s.io/json does: without a '.', an int64 if it parses as one; else
// a float64; a float out of range is an error.
func (d *decoder) number() (any, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos < len(d.data) && d.data[d.pos] == '0':
		d.pos++
	case d.pos < len(d.data) && d.data[d.pos] >= '1' && d.data[d.pos] <= '9':
		d.digits()
	default:
		return nil, d.errorf("invalid number: expected a digit")
	}
	dot := false
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		dot = true
		d.pos++
		if d.digits() == 0 {
			return nil, d.errorf("invalid number: expected a digit after the decimal point")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if d.digits() == 0 {
			return nil, d.errorf("invalid number: expected a digit in the exponent")
		}
	}
	s := string(d.data[start:d.pos])
	if !dot {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, &SyntaxError{Offset: start, msg: fmt.Sprintf("number %s cannot be represented as a float64", s)}
	}
	return f, nil
}

func (d *decoder) digits() int {
	n := 0
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
		n++
	}
	return n
}

// string decodes a string literal. Like encoding/json, it replaces invalid
// UTF-8 and unpaired surrogate escapes with U+FFFD.
func (d *decoder) string() (string, error) {
	d.pos++ // "
	start := d.pos
	// Fast path: printable ASCII without escapes is copied as is.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := string(d.data[start:d.pos])
			d.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		d.pos++
	}
	buf := make([]byte, d.pos-start, d.pos-start+16)
	copy(buf, d.data[start:d.pos])
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return string(buf), nil
		case c < 0x20:
			return "", d.errorf("invalid control character %q in string literal", c)
		case c == '\\':
			if d.pos+1 >= len(d.data) {
				return "", d.errorf("unexpected end of JSON input")
			}
			e := d.data[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape in string literal")
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate followed by an escaped low one is one
					// rune; anything else is U+FFFD.
					r2 := utf8.RuneError
					if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
						save := d.pos
						d.pos += 2
						low, ok := d.hex4()
						if !ok {
							return "", d.errorf("invalid \\u escape in string literal")
						}
						if dec := utf16.DecodeRune(r, low); dec != utf8.RuneError {
							r2 = dec
						} else {
							d.pos = save
						}
					}
					r = r2
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", d.errorf("invalid escape character %q in string literal", e)
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, d.data[d.pos:d.pos+size]...)
			}
			d.pos += size
		}
	}
	return "", d.errorf("unexpected end of JSON input")
}

// symbol decodes a string, sharing the copy of the vocabulary's words: an
// object key (Kubernetes objects repeat a small vocabulary of keys in every
// object) or an envelope field.
func (d *decoder) symbol() (string, error) {
	if b, ok := d.plain(); ok {
		if w := lookupWord(b); w != nil {
			return w.text, nil
		}
		return string(b), nil
	}
	return d.string()
}

// stringValue decodes a string as a value: a word of the vocabulary comes
// already boxed, where any other string is copied and boxed.
func (d *decoder) stringValue() (any, error) {
	if b, ok := d.plain(); ok {
		if w := lookupWord(b); w != nil {
			return w.value, nil
		}
		return string(b), nil
	}
	return d.string()
}

// plainByte is true for the bytes a plain string holds as they are:
// printable ASCII but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plain reads the string at d.pos when it is printable ASCII without
// escapes, returning its bytes (still the input's); anything else is left
// to string, which unescapes and checks UTF-8.
func (d *decoder) plain() ([]byte, bool) {
	end := d.pos + 1
	for end < len(d.data) && plainByte[d.data[end]] {
		end++
	}
	if end >= len(d.data) || d.data[end] != '"' {
		return nil, false
	}
	b := d.data[d.pos+1 : end]
	d.pos = end + 1
	return b, true
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.data)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	d.pos += 4
	return r, true
}
