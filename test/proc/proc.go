// Package proc reads what a process has used — CPU time and resident
// memory — from Linux's /proc, for the benchmarks' resource figures: the
// load benchmarks report them for `shepherd serve`, the gang benchmark for
// itself and for the kube-apiserver and etcd it runs.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self is the pid argument that means this process.
const Self = 0

// userHZ is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on Linux.
const userHZ = 100

func dir(pid int) string {
	if pid == Self {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}

// stat returns a process's command name and the fields of /proc/<pid>/stat
// after it, the first being the state (field 3 of the whole line).
func stat(pid int) (comm string, fields []string, err error) {
	b, err := os.ReadFile(dir(pid) + "/stat")
	if err != nil {
		return "", nil, err
	}
	// The command name is parenthesised and may itself hold spaces or
	// parentheses: it ends at the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", nil, fmt.Errorf("%s/stat: unexpected format %q", dir(pid), s)
	}
	return s[open+1 : end], strings.Fields(s[end+2:]), nil
}

// CPU is the user+system CPU time a process has used so far: to the
// microsecond for this process (getrusage), to the clock tick for others.
func CPU(pid int) (time.Duration, error) {
	if pid == Self {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, fmt.Errorf("getrusage: %w", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
	}
	_, f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("%s/stat: %d fields, want at least 15", dir(pid), len(f)+2)
	}
	// utime and stime are fields 14 and 15 of the whole line.
	ut, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/stat utime: %w", dir(pid), err)
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s/stat stime: %w", dir(pid), err)
	}
	return time.Duration(ut+st) * (time.Second / userHZ), nil
}

// Memory returns a process's resident set size now and its peak (VmRSS and
// VmHWM of /proc/<pid>/status) in MiB.
func Memory(pid int) (rss, peak float64, err error) {
	b, err := os.ReadFile(dir(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

// Children returns the pids of this process's children whose command name
// is one of names, by name: how a test finds the control plane envtest
// started for it.
func Children(names ...string) (map[string]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := strconv.Itoa(os.Getpid())
	out := map[string]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, f, err := stat(pid)
		if err != nil || len(f) < 2 || f[1] != self { // f[1] is the parent's pid
			continue // gone since listed, or not ours
		}
		for _, n := range names {
			if comm == n {
				out[n] = pid
			}
		}
	}
	return out, nil
}
