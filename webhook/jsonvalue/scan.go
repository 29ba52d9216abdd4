package jsonvalue

// Scanner reads one document a value at a time, for a caller that wants a
// few fields of an envelope and the decoded values of others, without
// building maps for the envelope itself. The values it decodes, and the
// documents it accepts, are those of Object and Value; errors carry the
// same messages and byte offsets.
type Scanner struct {
	d     decoder
	depth int
}

// NewScanner returns a Scanner at the start of data. It builds the objects
// and arrays it decodes from a when a is not nil (see Arena for when they
// may be handed back).
func NewScanner(data []byte, a *Arena) *Scanner {
	return &Scanner{d: decoder{data: data, arena: a}}
}

// Next reports the first byte of the next value, after whitespace: '{',
// '[', '"', 't' or 'f', 'n', '-' or a digit; 0 at the end of the input.
func (s *Scanner) Next() byte {
	s.d.skipSpace()
	if s.d.pos >= len(s.d.data) {
		return 0
	}
	return s.d.data[s.d.pos]
}

// Value decodes the next value.
func (s *Scanner) Value() (any, error) { return s.d.value(s.depth) }

// String decodes the next value, which Next reported to be a string. The
// words an AdmissionReview repeats in every request (its kinds, groups,
// versions, operations) are not copied.
func (s *Scanner) String() (string, error) {
	s.d.skipSpace()
	return s.d.symbol()
}

// Members reads the next value, which Next reported to be an object, one
// member at a time: member is called with each key and must read the
// member's value with the Scanner (Value, String, Members).
func (s *Scanner) Members(member func(key string) error) error {
	s.d.skipSpace()
	if s.depth >= MaxDepth {
		return s.d.errorf("exceeded max depth %d", MaxDepth)
	}
	s.depth++
	defer func() { s.depth-- }()
	return s.d.members(member)
}

// End checks that only whitespace follows the value read.
func (s *Scanner) End() error { return s.d.end() }
