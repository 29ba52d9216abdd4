package offline

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadLimited reads streams across its chunk sizes and regular files,
// at and around the limit.
func TestReadLimited(t *testing.T) {
	content := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		return b
	}
	for _, size := range []int{0, 1, firstChunk - 1, firstChunk, firstChunk + 1, 3*firstChunk + 7, maxChunk + firstChunk + 3} {
		for _, limit := range []int64{int64(size), int64(size) + 1, int64(size) - 1} {
			if limit < 1 {
				continue
			}
			want := content(size)
			f := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(f, want, 0o600); err != nil {
				t.Fatal(err)
			}
			file, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, src := range []struct {
				name string
				r    io.Reader
			}{{"stream", onlyReader{bytes.NewReader(want)}}, {"regular file", file}} {
				got, err := ReadLimited(src.r, "in", limit)
				var tl *InputTooLargeError
				switch {
				case int64(size) > limit:
					if !errors.As(err, &tl) || tl.Name != "in" || tl.Limit != limit {
						t.Errorf("%s of %d bytes, limit %d: error %v, want InputTooLargeError", src.name, size, limit, err)
					}
				case err != nil:
					t.Errorf("%s of %d bytes, limit %d: %v", src.name, size, limit, err)
				case !bytes.Equal(got, want):
					t.Errorf("%s of %d bytes, limit %d: read %d bytes, not the input", src.name, size, limit, len(got))
				}
			}
			file.Close()
		}
	}
	// A regular file is refused by its size, before any read: this one
	// is open for writing only, so a read would fail.
	f := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(f, []byte(strings.Repeat("x", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	wo, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wo.Close()
	if _, err := ReadLimited(wo, "big", 10); !errors.As(err, new(*InputTooLargeError)) {
		t.Errorf("regular file over the limit: %v, want InputTooLargeError without reading", err)
	}
}

// onlyReader hides everything but Read (a stream of no known size).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
