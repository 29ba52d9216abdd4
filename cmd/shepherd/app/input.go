package app

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// maxInputFlag bounds what one file or stream given to check, test, audit
// and export may hold. Without it `check -f /dev/zero` grows until the
// kernel kills it, and 400 MB piped into `check -f -` took 1.3 GB.
const maxInputFlag = "max-input-bytes"

// defaultMaxInputBytes is --max-input-bytes' default: far above any real
// manifest set (the largest upstream CRD is about 1 MB), low enough that a
// mistaken input (a device, a log, a binary) is refused in a fraction of
// a second without taking the machine's memory.
const defaultMaxInputBytes = 64 << 20

// inputLimit is the value of --max-input-bytes: a byte count, written
// plainly (67108864) or as a quantity (64Mi, 100M).
type inputLimit int64

// addMaxInputFlag defines --max-input-bytes on fs, set to its default: the
// one definition every command that reads manifests shares, so that the
// flag is spelled and documented alike on all of them.
func addMaxInputFlag(fs *pflag.FlagSet, l *inputLimit) {
	*l = defaultMaxInputBytes
	fs.Var(l, maxInputFlag, "most bytes one input file (or standard input) may hold, as a count or a quantity (67108864, 64Mi, 100M); a larger one is an error (exit 2) naming it")
}

func (l *inputLimit) String() string {
	return resource.NewQuantity(int64(*l), resource.BinarySI).String()
}

func (l *inputLimit) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a byte count such as 67108864 or 64Mi: %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("want a positive whole number of bytes, got %s", s)
	}
	*l = inputLimit(n)
	return nil
}

func (l *inputLimit) Type() string { return "quantity" }

// bytes is the limit as a count, with the default in place of an unset
// value (options built without the flag, as tests build them).
func (l inputLimit) bytes() int64 {
	if l <= 0 {
		return defaultMaxInputBytes
	}
	return int64(l)
}

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
	l := inputLimit(e.Limit)
	return fmt.Sprintf("%s: larger than the %s bytes --%s allows; raise --%s or split %s", e.Name, l.String(), maxInputFlag, maxInputFlag, what)
}

// stdinDescription names standard input in InputTooLargeError.
const stdinDescription = "standard input"

// readFileLimited reads file whole, refusing one larger than limit bytes
// (readLimited).
func readFileLimited(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// A read error is an *fs.PathError that names the file already.
	return readLimited(f, file, limit)
}

// Reads of a stream of unknown length start with firstChunk bytes and
// double up to maxChunk.
const (
	firstChunk = 64 << 10
	maxChunk   = 8 << 20
)

// readLimited reads r to its end, at most limit bytes; name is what the
// error calls it. A regular file (a path, or standard input redirected
// from one) is refused by its size, before any byte is read, and read
// into a buffer of that size. Anything else (a pipe, a device such as
// /dev/zero) is read in chunks through an io.LimitReader that stops one
// byte past the limit: never more than limit+1 bytes are held, and the
// chunks are joined only for an input within the limit, so an input is
// never in memory twice over beyond that one copy (growing one buffer by
// doubling would hold up to three times the input while it grows).
func readLimited(r io.Reader, name string, limit int64) ([]byte, error) {
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

// checkFileSize refuses a regular file larger than limit before anything
// reads it: for the files read whole by readers that take a path, not a
// stream (pinned.Read for --crd, policytest.Load for suites), which cannot
// be bounded otherwise. Other kinds of files pass; the caller decides.
func checkFileSize(file string, limit int64) (regular bool, err error) {
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
