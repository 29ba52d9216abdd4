package server

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the Go garbage collector's target (GOGC) `shepherd
// serve` runs with unless GOGC is set. Admission is allocation-heavy and the
// server's live heap is small (compiled rules, schemas, a few caches): at
// Go's default of 100 the collector runs every few hundred admissions and
// is marking for about a third of the time, which is where the latency tail
// came from. At 200 it runs half as often; higher values shortened the tail
// further but took the reconcilers' memory at scale (300 gangs) past
// 256 MiB. GOMEMLIMIT (the Deployment sets it to the container's memory
// limit) still makes it collect sooner as memory runs short.
const DefaultGCPercent = 200

// SetGCPercent sets the garbage collector's target to percent, as `shepherd
// serve` runs, unless the GOGC environment variable chose one; the returned
// function puts back the target before (benchmarks that run shepherd's
// code in-process defer it).
func SetGCPercent(percent int) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	before := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(before) }
}
