package offline

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxInputFlag bounds what one file or stream given to check, test, audit
// and export may hold. Without it `check -f /dev/zero` grows until the
// kernel kills it, and 400 MB piped into `check -f -` took 1.3 GB.
const MaxInputFlag = "max-input-bytes"

// InputTooLargeError is a file or stream larger than --max-input-bytes.
type InputTooLargeError struct {
	// Name is the file, or "standard input".
	Name  string
	Limit int64
}

func (e *InputTooLargeError) Error() string {
	what := "the file"
	if e.Name == stdinDescription {
		what = "the input"
	}
	// The limit as the flag is written ("64Mi") and in bytes.
	limit := fmt.Sprintf("%d bytes", e.Limit)
	if q := resource.NewQuantity(e.Limit, resource.BinarySI).String(); q != strconv.FormatInt(e.Limit, 10) {
		limit = q + " (" + limit + ")"
	}
	return fmt.Sprintf("%s: larger than the %s --%s allows; raise --%s or split %s", e.Name, limit, MaxInputFlag, MaxInputFlag, what)
}

// stdinDescription names standard input in InputTooLargeError.
const stdinDescription = "standard input"

// ReadFileLimited reads file whole, refusing one larger than limit bytes
// (ReadLimited).
func ReadFileLimited(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A read error is an *fs.PathError that names the file already.
	return ReadLimited(f, file, limit)
}

// Reads of a stream of unknown length start with firstChunk bytes and
// double up to maxChunk.
const (
	firstChunk = 64 << 10
	maxChunk   = 8 << 20
)

// ReadLimited reads r to its end, at most limit bytes; name is what the
// error calls it. A regular file (a path, or standard input redirected
// from one) is refused by its size, before any byte is read, and read
// into a buffer of that size. Anything else (a pipe, a device such as
// /dev/zero) is read in chunks through an io.LimitReader that stops one
// byte past the limit: never more than limit+1 bytes are held, and the
// chunks are joined only for an input within the limit, so an input is
// never in memory twice over beyond that one copy (growing one buffer by
// doubling would hold up to three times the input while it grows).
func ReadLimited(r io.Reader, name string, limit int64) ([]byte, error) {
	next := int64(firstChunk)
	if f, ok := r.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			size := info.Size()
			if off, err := f.Seek(0, io.SeekCurrent); err == nil && off <= size {
				size -= off
			}
			if size > limit {
				return nil, &InputTooLargeError{Name: name, Limit: limit}
			}
			// One byte more than the size: the end is seen without a
			// second buffer (and a file that grew since is still caught).
			next = size + 1
		}
	}
	lr := &io.LimitedReader{R: r, N: math.MaxInt64}
	if limit < math.MaxInt64 {
		lr.N = limit + 1
	}
	var (
		chunks [][]byte
		total  int64
	)
	for lr.N > 0 {
		c := make([]byte, min(next, lr.N))
		n, err := io.ReadFull(lr, c)
		if n > 0 {
			chunks = append(chunks, c[:n])
			total += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		next = min(2*next, maxChunk)
	}
	if total > limit {
		return nil, &InputTooLargeError{Name: name, Limit: limit}
	}
	switch len(chunks) {
	case 0:
		return nil, nil
	case 1:
		return chunks[0], nil
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}

// CheckFileSize refuses a regular file larger than limit before anything
// reads it: for the files read whole by readers that take a path, not a
// stream (pinned.Read for --crd, policytest.Load for suites), which cannot
// be bounded otherwise. Other kinds of files pass; the caller decides.
func CheckFileSize(file string, limit int64) (regular bool, err error) {
	info, err := os.Stat(file)
	if err != nil {
		return false, err
	}
	if !info.Mode().IsRegular() {
		return false, nil
	}
	if info.Size() > limit {
		return true, &InputTooLargeError{Name: file, Limit: limit}
	}
	return true, nil
}
