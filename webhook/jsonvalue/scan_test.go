package jsonvalue

import (
	"reflect"
	"strings"
	"testing"
)

// scanObject rebuilds an object member by member with a Scanner, strings
// through String and everything else through Value.
func scanObject(doc []byte) (map[string]any, error) {
	s := NewScanner(doc, nil)
	if s.Next() != '{' {
		return Object(doc)
	}
	m := map[string]any{}
	err := s.Members(func(key string) error {
		if s.Next() == '"' {
			v, err := s.String()
			m[key] = v
			return err
		}
		v, err := s.Value()
		m[key] = v
		return err
	})
	if err == nil {
		err = s.End()
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// A Scanner accepts what Object accepts, with the same values, and fails
// where Object fails with the same message and offset.
func TestScannerReadsAsObjectDoes(t *testing.T) {
	docs := append([]string{
		`{"kind":"PodCliqueSet","apiVersion":"grove.io/v1alpha1","uid":"u","n":1,"a":[1,"CREATE"],"o":{"group":"grove.io"}}`,
		`{"a":"x\u00e9","b":"\ud83d"}`, `{"a":"CREATE`, `{"a":1 "b"}`, `{"a":tru}`,
	}, cases...)
	for _, c := range docs {
		want, wantErr := Object([]byte(c))
		got, gotErr := scanObject([]byte(c))
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Errorf("%q: error %v, Object's %v", c, gotErr, wantErr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %#v, Object's %#v", c, got, want)
		}
	}
}

// Nesting through Members counts toward MaxDepth like nesting in a value.
func TestScannerDepthIsBounded(t *testing.T) {
	doc := []byte(`{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`)
	_, want := Object(doc)
	_, got := scanObject(doc)
	if want == nil || got == nil || got.Error() != want.Error() {
		t.Fatalf("error %v, Object's %v; want the same max depth error", got, want)
	}
}

// The vocabulary's words decode to the same strings as any other, and are
// found as words; a string that only resembles one is not found as it.
func TestVocabularyWordsDecodeAsStrings(t *testing.T) {
	for _, w := range vocabulary {
		v, err := Value([]byte(`"` + w.text + `"`))
		if err != nil || v != w.text {
			t.Fatalf("%q decoded to %#v, %v", w.text, v, err)
		}
		if got := lookupWord([]byte(w.text)); got == nil || got.text != w.text {
			t.Errorf("%q is not found in the vocabulary's index", w.text)
		}
		for _, near := range []string{w.text + "x", w.text[:len(w.text)-1], "x" + w.text} {
			if got := lookupWord([]byte(near)); got != nil && got.text != near {
				t.Errorf("%q is found as the word %q", near, got.text)
			}
		}
	}
	if lookupWord(nil) != nil {
		t.Error("the empty string is found as a word")
	}
}
