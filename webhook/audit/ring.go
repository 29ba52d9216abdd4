package audit

import "sync"

// Ring is a bounded, concurrency-safe buffer of the most recent records: when
// full, each new record overwrites the oldest, so memory stays fixed however
// many verdicts the server sees.
type Ring struct {
	mu    sync.Mutex
	buf   []Record
	next  int // index the next record is written to
	count int // records held, ≤ len(buf)
}

// NewRing returns a ring holding at most size records (at least one).
func NewRing(size int) *Ring {
	if size < 1 {
		size = 1
	}
	return &Ring{buf: make([]Record, size)}
}

// Add stores r, evicting the oldest record when the ring is full.
func (r *Ring) Add(rec Record) {
	r.mu.Lock()
	r.buf[r.next] = rec
	r.next = (r.next + 1) % len(r.buf)
	if r.count < len(r.buf) {
		r.count++
	}
	r.mu.Unlock()
}

// Len is the number of records held.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Query returns copies of the records that match q, oldest first; with a
// limit, only the newest q.Limit of them.
func (r *Ring) Query(q Query) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0)
	start := (r.next - r.count + len(r.buf)) % len(r.buf)
	for i := 0; i < r.count; i++ {
		rec := &r.buf[(start+i)%len(r.buf)]
		if q.Matches(rec) {
			c := *rec
			c.Groups = append([]string(nil), rec.Groups...)
			out = append(out, c)
		}
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[len(out)-q.Limit:]
	}
	return out
}
