//go:build linux

// Package cli runs the shepherd binary as a user does, for what only a
// process of its own shows: its exit status, how long it runs and its peak
// resident memory (ru_maxrss, in KiB on Linux).
package cli

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildShepherd builds cmd/shepherd into the test's directory.
func buildShepherd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the shepherd binary")
	}
	bin := filepath.Join(t.TempDir(), "shepherd")
	build := exec.Command("go", "build", "-o", bin, "github.com/shepherd-k8s/shepherd/cmd/shepherd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shepherd: %v\n%s", err, out)
	}
	return bin
}

// repeatReader yields s over and over, without end: an input of any size
// that the test never holds.
type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// TestCheckStopsAtMaxInputBytes: `check -f /dev/zero` and 400 MB piped into
// `check -f -` stop at --max-input-bytes' default (64Mi): exit 2 within
// seconds, a message naming the input and the flag, and a peak resident
// memory far below the input (before the limit, /dev/zero grew to 20 GB
// and the 400 MB took 1.3 GB).
func TestCheckStopsAtMaxInputBytes(t *testing.T) {
	bin := buildShepherd(t)
	const doc = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {key: value}\n"
	for _, tc := range []struct {
		name  string
		args  []string
		stdin func() io.Reader
		input string // what the message names
	}{
		{"/dev/zero", []string{"check", "-f", "/dev/zero"}, nil, "/dev/zero"},
		{"400 MB on stdin", []string{"check", "-f", "-"}, func() io.Reader { return io.LimitReader(&repeatReader{s: doc}, 400_000_000) }, "standard input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			if tc.stdin != nil {
				// Not an *os.File: exec feeds it through a pipe, a stream
				// of no known size, and stops when shepherd exits.
				cmd.Stdin = tc.stdin()
			}
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			start := time.Now()
			err := cmd.Run()
			elapsed := time.Since(start)
			if cmd.ProcessState == nil {
				t.Fatalf("shepherd did not run: %v", err)
			}
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Errorf("exit %d (%v), want 2; stderr %.1000s", code, err, stderr.String())
			}
			if elapsed > 5*time.Second {
				t.Errorf("took %v, want under 5s", elapsed)
			}
			want := tc.input + ": larger than the 64Mi (67108864 bytes) --max-input-bytes allows"
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %.1000q lacks %q", stderr.String(), want)
			}
			maxRSS := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
			if maxRSS >= 256<<10 {
				t.Errorf("peak RSS %d MiB, want under 256 MiB", maxRSS>>10)
			}
			t.Logf("exit %d in %v, peak RSS %d MiB", cmd.ProcessState.ExitCode(), elapsed.Round(time.Millisecond), maxRSS>>10)
		})
	}
}

// TestPlainBuildIsComplete: `go build ./cmd/shepherd`, with no make target
// first (what `go install` and the Dockerfile do), gives a binary whose
// offline commands have the upstream schemas: check allows the valid
// examples (a TrainJob and its runtime checked together) and export renders
// the policies.
func TestPlainBuildIsComplete(t *testing.T) {
	bin := buildShepherd(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "-f", filepath.Join(root, "examples", "valid")},
		{"export", "vap"},
	} {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stdout.Len() == 0 {
			t.Errorf("shepherd %s: %v, %d bytes out\n%s%s", strings.Join(args, " "), err, stdout.Len(), stdout.String(), stderr.String())
		}
	}
}
