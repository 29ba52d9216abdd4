package jsonvalue

// Arena supplies the maps and arrays a decoder builds objects from, and
// takes them back when the caller is done with everything it decoded, so a
// server decoding one object per request reuses the same maps instead of
// allocating them again: Go maps are most of what a decoded object costs
// (even a one-key map is a few hundred bytes), and an admission's
// allocations set how often the garbage collector runs and so the tail of
// its latency.
//
// Maps are handed out in order and come back in the same order, so a
// document shaped like the last one gets, object by object, a map already
// grown to the size it needs.
//
// An Arena is not safe for concurrent use. The zero value is ready.
type Arena struct {
	maps   []map[string]any
	nmaps  int // maps[:nmaps] are in use
	arrays [][]any
	narray int // arrays[:narray] are in use
}

// Bounds on what an Arena keeps between uses: one unusually large document
// must not pin its memory for as long as the Arena lives.
const (
	maxArenaMaps   = 512
	maxArenaArrays = 128
	// maxKeptLen is the largest map or array kept; a cleared map keeps its
	// capacity, and every later use of a huge one would iterate it whole.
	maxKeptLen = 32
)

func (a *Arena) newMap() map[string]any {
	if a.nmaps < len(a.maps) {
		m := a.maps[a.nmaps]
		a.nmaps++
		return m
	}
	m := map[string]any{}
	if len(a.maps) < maxArenaMaps {
		a.maps = append(a.maps, m)
		a.nmaps++
	}
	return m
}

// newArray returns elems copied into an array of exactly their length.
func (a *Arena) newArray(elems []any) []any {
	if a.narray < len(a.arrays) {
		s := a.arrays[a.narray]
		if cap(s) < len(elems) {
			s = make([]any, len(elems))
			a.arrays[a.narray] = s
		}
		a.narray++
		s = s[:len(elems)]
		copy(s, elems)
		return s
	}
	s := append([]any(nil), elems...)
	if len(a.arrays) < maxArenaArrays {
		a.arrays = append(a.arrays, s)
		a.narray++
	}
	return s
}

// Reset takes back every map and array handed out since the last Reset:
// each is emptied for reuse. The caller must hold no reference to anything
// decoded with the Arena, nor to anything reachable from it; strings,
// numbers and booleans are not recycled and stay valid.
func (a *Arena) Reset() {
	for i, m := range a.maps[:a.nmaps] {
		if len(m) > maxKeptLen {
			a.maps[i] = map[string]any{}
			continue
		}
		clear(m)
	}
	for i, s := range a.arrays[:a.narray] {
		if cap(s) > maxKeptLen {
			a.arrays[i] = nil
			continue
		}
		// Drop the elements' references so the garbage collector can
		// reclaim them; the length is restored by newArray.
		clear(s[:cap(s)])
	}
	a.nmaps, a.narray = 0, 0
}
