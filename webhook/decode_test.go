package webhook

import (
	"strings"
	"testing"
)

// An undecodable object is denied with a message naming the object and
// what is wrong with it: where its JSON breaks, or what it is instead of
// an object.
func TestDecodeNamesWhatIsWrong(t *testing.T) {
	for raw, want := range map[string]string{
		`{"spec":`:        "cannot decode the old object: unexpected end of JSON input (at byte 8)",
		`{"spec":1,}`:     "cannot decode the old object: invalid character '}' looking for beginning of object key string (at byte 11)",
		`[1,2]`:           "cannot decode the old object: want a JSON object, got an array",
		`null`:            "cannot decode the old object: want a JSON object, got null",
		`"x"`:             "cannot decode the old object: want a JSON object, got a string",
		`7`:               "cannot decode the old object: want a JSON object, got a number",
		`{"a":1} {"b":2}`: "cannot decode the old object: invalid character '{' after top-level value",
	} {
		m, bad := decode([]byte(raw), "old object")
		if m != nil || bad == nil || bad.Rule != RuleDecode || bad.Action != ActionDeny || !strings.Contains(bad.Message, want) {
			t.Errorf("%s: decoded %v, violation %+v; want a Deny containing %q", raw, m, bad, want)
		}
	}
}

// Numbers decode as the apiserver decodes them: integers as int64.
func TestDecodeKeepsIntegersAsInt64(t *testing.T) {
	m, bad := decode([]byte(`{"replicas":3,"ratio":1.5,"big":9007199254740993}`), "object")
	if bad != nil {
		t.Fatal(bad.Message)
	}
	if m["replicas"] != int64(3) || m["ratio"] != 1.5 || m["big"] != int64(9007199254740993) {
		t.Errorf("decoded %#v", m)
	}
}
