package app

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/shepherd-k8s/shepherd/offline"
)

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
	fs.Var(l, offline.MaxInputFlag, "most bytes one input file (or standard input) may hold, as a count or a quantity (67108864, 64Mi, 100M); a larger one is an error (exit 2) naming it")
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
