package background

import (
	"testing"
	"time"
)

// TestPauseAfter: the pause makes the batch the given share of batch and
// pause; a share of 1 never pauses.
func TestPauseAfter(t *testing.T) {
	for _, tc := range []struct {
		took  time.Duration
		share float64
		want  time.Duration
	}{
		{10 * time.Millisecond, 0.5, 10 * time.Millisecond},
		{10 * time.Millisecond, 0.25, 30 * time.Millisecond},
		{10 * time.Millisecond, 0.1, 90 * time.Millisecond},
		{10 * time.Millisecond, 1, 0},
	} {
		got := pauseAfter(tc.took, tc.share)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("pauseAfter(%v, %v) = %v, want %v", tc.took, tc.share, got, tc.want)
		}
	}
}

// TestNewDefaultsTheCPUShare: a share outside (0, 1] is the default.
func TestNewDefaultsTheCPUShare(t *testing.T) {
	for _, s := range []float64{0, -1, 1.5} {
		if got := New(Options{CPUShare: s}).opts.CPUShare; got != DefaultCPUShare {
			t.Errorf("New(CPUShare %v): %v, want %v", s, got, DefaultCPUShare)
		}
	}
	if got := New(Options{CPUShare: 0.6}).opts.CPUShare; got != 0.6 {
		t.Errorf("New(CPUShare 0.6): %v", got)
	}
}
