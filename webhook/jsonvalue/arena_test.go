package jsonvalue

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func decodeIn(a *Arena, doc string) (any, error) {
	s := NewScanner([]byte(doc), a)
	v, err := s.Value()
	if err == nil {
		err = s.End()
	}
	return v, err
}

func identity(m map[string]any) uintptr { return uintptr(reflect.ValueOf(m).UnsafePointer()) }

// Documents decoded one after another through one Arena, reset in between,
// come out exactly as without it: a reused map or array carries nothing of
// the document it held before.
func TestArenaDecodesAsValueDoes(t *testing.T) {
	docs := append([]string{
		`{"a":{"b":1,"c":[1,2,3],"d":{"e":"f"}},"g":[{"h":1},{"i":2}]}`,
		`{"a":{"x":true},"g":[{"h":2,"j":3}],"k":[]}`,
		`{"a":{"b":1,"c":[1,2,3,4,5,6,7,8,9,10]}}`,
		`[{"a":1},{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}]`,
	}, cases...)
	var a Arena
	for round := range 2 {
		for i := range docs {
			doc := docs[i]
			if round == 1 {
				doc = docs[len(docs)-1-i] // different shapes land on each map
			}
			want, wantErr := Value([]byte(doc))
			got, gotErr := decodeIn(&a, doc)
			if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
				t.Fatalf("%q: error %v, without an arena %v", doc, gotErr, wantErr)
			}
			if wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: got %#v, without an arena %#v", doc, got, want)
			}
			a.Reset()
		}
	}
}

// The same document decoded again after Reset is built from the same maps,
// in the same places, and allocates none of them.
func TestArenaReusesItsMaps(t *testing.T) {
	const doc = `{"metadata":{"name":"x","labels":{"a":"b"}},"spec":{"cliques":[{"name":"c","spec":{"replicas":1}}]}}`
	var a Arena
	first, err := decodeIn(&a, doc)
	if err != nil {
		t.Fatal(err)
	}
	root := first.(map[string]any)
	ids := []uintptr{identity(root), identity(root["metadata"].(map[string]any)), identity(root["spec"].(map[string]any))}
	a.Reset()
	if len(root) != 0 {
		t.Fatalf("Reset left the decoded root with %d keys; it must empty what it takes back", len(root))
	}
	second, err := decodeIn(&a, doc)
	if err != nil {
		t.Fatal(err)
	}
	root = second.(map[string]any)
	got := []uintptr{identity(root), identity(root["metadata"].(map[string]any)), identity(root["spec"].(map[string]any))}
	if !reflect.DeepEqual(got, ids) {
		t.Errorf("maps after Reset = %v, want the first decoding's %v in the same places", got, ids)
	}
	a.Reset()

	plain := testing.AllocsPerRun(50, func() {
		if _, err := Value([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	})
	reused := testing.AllocsPerRun(50, func() {
		if _, err := decodeIn(&a, doc); err != nil {
			t.Fatal(err)
		}
		a.Reset()
	})
	// Six objects and one array: each one allocation or more without the
	// arena, none with it (the Scanner itself is one).
	if reused > plain-6 {
		t.Errorf("decoding through a warm arena allocates %v times, without one %v: want at least the 7 maps and arrays fewer", reused, plain)
	}
}

// An Arena keeps neither huge maps nor an unbounded number of them.
func TestArenaBoundsWhatItKeeps(t *testing.T) {
	var keys []string
	for i := range maxKeptLen + 1 {
		keys = append(keys, fmt.Sprintf("%q:%d", fmt.Sprint("k", i), i))
	}
	huge := `{"h":{` + strings.Join(keys, ",") + `}}`
	var a Arena
	v, err := decodeIn(&a, huge)
	if err != nil {
		t.Fatal(err)
	}
	h := identity(v.(map[string]any)["h"].(map[string]any))
	a.Reset()
	v, err = decodeIn(&a, huge)
	if err != nil {
		t.Fatal(err)
	}
	if identity(v.(map[string]any)["h"].(map[string]any)) == h {
		t.Errorf("a map of %d keys was kept for reuse; at most %d are", maxKeptLen+1, maxKeptLen)
	}
	a.Reset()

	many := "[" + strings.Repeat(`{"a":1},`, 2*maxArenaMaps) + `{"a":1}]`
	if _, err := decodeIn(&a, many); err != nil {
		t.Fatal(err)
	}
	a.Reset()
	if len(a.maps) > maxArenaMaps {
		t.Errorf("the arena keeps %d maps, want at most %d", len(a.maps), maxArenaMaps)
	}
}
