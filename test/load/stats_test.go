package load

import (
	"math"
	"sort"
	"time"
	"unsafe"
)

// percentile of sorted durations (p in [0,1]).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

// noiseFloor measures what this machine does to the latency of work that
// neither allocates nor touches memory: an arithmetic loop calibrated to
// take about median, run n times and timed like the benchmark's ops. Its
// p99 over its p50 is the tail the machine adds by itself (timer and
// device interrupts, other processes, a hypervisor taking the core),
// before the code under test or its garbage collector add any.
func noiseFloor(median time.Duration, n int) (p50, p99 time.Duration) {
	iters := 1 << 10
	for {
		// The fastest of a few runs: one interrupted run would otherwise
		// calibrate ops far shorter than the median.
		d := time.Duration(math.MaxInt64)
		for range 5 {
			start := time.Now()
			spin(iters)
			d = min(d, time.Since(start))
		}
		if d >= median/4 {
			iters = int(float64(iters) * float64(median) / float64(d))
			break
		}
		iters *= 2
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		spin(iters)
		lat[i] = time.Since(start)
	}
	sortDurations(lat)
	return percentile(lat, 0.5), percentile(lat, 0.99)
}

var spinSink uint64

// spin is a dependent chain of multiply-adds: pure core time.
func spin(n int) {
	x := spinSink | 1
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink = x
}

// allocFloor measures what allocating alone does to the tail on this
// machine: ops that each build a linked chain of 64-byte objects holding
// pointers, bytesPerOp in all, and do nothing else, run n times under the
// current garbage-collector target and timed like the benchmark's ops. The
// collector traces such a chain as it traces decoded JSON objects, so the
// p99 is what an op allocating that much pays in stop-the-world pauses,
// mark assists and cache misses, however little work it does.
func allocFloor(bytesPerOp int64, n int) (p50, p99 time.Duration) {
	objs := max(1, int(bytesPerOp/int64(unsafe.Sizeof(link{}))))
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		var head *link
		for j := range objs {
			head = &link{next: head, n: j}
		}
		linkSink = head
		lat[i] = time.Since(start)
	}
	linkSink = nil
	sortDurations(lat)
	return percentile(lat, 0.5), percentile(lat, 0.99)
}

// link is a 64-byte heap object with pointers.
type link struct {
	next    *link
	pad     [3]*link
	n       int
	_, _, _ int
}

var linkSink *link
