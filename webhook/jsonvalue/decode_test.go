package jsonvalue

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	kjson "sigs.k8s.io/json"
)

// reference decodes as apimachinery does.
func reference(data []byte) (any, error) {
	var v any
	err := kjson.UnmarshalCaseSensitivePreserveInts(data, &v)
	return v, err
}

var cases = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `1.0`, `1.5e3`, `1e3`, `1E-2`, `-0.0`,
	`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
	`1e400`, `01`, `1.`, `.5`, `+1`, `1e`, `1e+`, `-`, `--1`,
	`""`, `"a"`, `"\u00e9\n\t\"\\\/\b\f\r"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`,
	`"\ud83d\uZZZZ"`, `"\x"`, `"\u12"`, "\"\x01\"", "\"caf\xc3\xa9\"", "\"bad \xff byte\"", "\"\xed\xa0\x80\"",
	`{"a":1,"a":2}`, `{"a":[1,{"b":null}],"c":"d"}`, ` { "a" : [ 1 , 2 ] } `, `{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`,
	`{1:2}`, `[1 2]`, `{"a":1 "b":2}`, `{`, `[`, `"abc`, `tru`, `nul`, `falsey`, `{} {}`, `{}x`, "\ufeff{}", ``, `   `,
	`{"spec":{"replicas":3,"template":{"cliques":[{"name":"x","spec":{"minAvailable":1}}]}}}`,
}

func same(t *testing.T, doc []byte) {
	t.Helper()
	want, wantErr := reference(doc)
	got, gotErr := Value(doc)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: error %v, reference error %v", doc, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: got %#v, reference %#v", doc, got, want)
	}
	// Object agrees with decoding into a map.
	var wantObj map[string]any
	wantObjErr := kjson.UnmarshalCaseSensitivePreserveInts(doc, &wantObj)
	gotObj, gotObjErr := Object(doc)
	if (wantObjErr == nil) != (gotObjErr == nil) {
		t.Fatalf("%q: Object error %v, reference error %v", doc, gotObjErr, wantObjErr)
	}
	if wantObjErr == nil && !reflect.DeepEqual(gotObj, wantObj) {
		t.Fatalf("%q: Object got %#v, reference %#v", doc, gotObj, wantObj)
	}
}

func TestDecodesAsApimachineryDoes(t *testing.T) {
	for _, c := range cases {
		same(t, []byte(c))
	}
}

func TestDepthIsBoundedNotAStackOverflow(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	_, err := Value([]byte(deep))
	var se *SyntaxError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "max depth") {
		t.Fatalf("error %v, want a max depth SyntaxError", err)
	}
	same(t, []byte(deep))
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	same(t, []byte(ok))
	if _, err := Value([]byte(ok)); err != nil {
		t.Fatalf("depth %d: %v", MaxDepth, err)
	}
}

func TestErrorsNameTheOffset(t *testing.T) {
	_, err := Object([]byte(`{"spec": {"replicas": 3,}}`))
	if err == nil || !strings.Contains(err.Error(), "offset 24") {
		t.Fatalf("error %v, want one naming offset 24", err)
	}
}

func TestNonObjectDocumentSaysWhatItIs(t *testing.T) {
	for doc, want := range map[string]string{`[1]`: "got an array", ` "a"`: "got a string", `7`: "got a number", `true`: "got a boolean"} {
		if _, err := Object([]byte(doc)); err == nil || !strings.Contains(err.Error(), "want a JSON object, "+want) {
			t.Errorf("%s: error %v, want one saying %q", doc, err, want)
		}
	}
}

func FuzzDecodesAsApimachineryDoes(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	var a Arena // shared across inputs, as a server's arenas are
	f.Fuzz(func(t *testing.T, doc []byte) {
		same(t, doc)
		// Through an arena reused from earlier documents: the same value.
		want, wantErr := Value(doc)
		got, gotErr := decodeIn(&a, string(doc))
		if (wantErr == nil) != (gotErr == nil) || (wantErr == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: through an arena %#v, %v; without %#v, %v", doc, got, gotErr, want, wantErr)
		}
		a.Reset()
	})
}
