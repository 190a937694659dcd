//go:build linux

// Package usage reads what the process has used so far (CPU time, peak
// resident memory), for benchmarks that report it: on a shared machine CPU
// time says more than wall time, which counts the time other processes
// hold the cores.
package usage

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU is the user and system CPU time of the process so far, garbage
// collection included; 0 if it cannot be read.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ResetPeakRSS resets the kernel's high-water mark of the process's
// resident memory (VmHWM) to what is resident now; tb is skipped where
// that cannot be done.
func ResetPeakRSS(tb testing.TB) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Skipf("cannot reset the peak resident memory: %v", err)
	}
}

// PeakRSS is VmHWM in bytes.
func PeakRSS(tb testing.TB) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}
