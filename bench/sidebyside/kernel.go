package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// kernelCounts is what the kernel counted for a proxy's processes during
// one load run (-perf-stat): system calls, by the kinds a proxy's data path
// makes, and context switches. Per request they compare how the proxies
// move bytes (reads and writes per answer, how often they wait in epoll,
// how often threads wake each other), and unlike rates they hardly move
// with the host's load.
type kernelCounts struct {
	Syscalls, Reads, Writes, Polls, Futex, Switches float64
}

// perfEvents are counted by perf stat; each kind sums the system calls that
// do that job, whichever a proxy uses (Go reads and writes, nginx recvs and
// writevs, haproxy sends and recvs).
var perfEvents = []struct {
	event string
	kind  func(*kernelCounts) *float64
}{
	{"raw_syscalls:sys_enter", func(k *kernelCounts) *float64 { return &k.Syscalls }},
	{"syscalls:sys_enter_read", func(k *kernelCounts) *float64 { return &k.Reads }},
	{"syscalls:sys_enter_readv", func(k *kernelCounts) *float64 { return &k.Reads }},
	{"syscalls:sys_enter_recvfrom", func(k *kernelCounts) *float64 { return &k.Reads }},
	{"syscalls:sys_enter_recvmsg", func(k *kernelCounts) *float64 { return &k.Reads }},
	{"syscalls:sys_enter_write", func(k *kernelCounts) *float64 { return &k.Writes }},
	{"syscalls:sys_enter_writev", func(k *kernelCounts) *float64 { return &k.Writes }},
	{"syscalls:sys_enter_sendto", func(k *kernelCounts) *float64 { return &k.Writes }},
	{"syscalls:sys_enter_sendmsg", func(k *kernelCounts) *float64 { return &k.Writes }},
	{"syscalls:sys_enter_epoll_wait", func(k *kernelCounts) *float64 { return &k.Polls }},
	{"syscalls:sys_enter_epoll_pwait", func(k *kernelCounts) *float64 { return &k.Polls }},
	{"syscalls:sys_enter_epoll_pwait2", func(k *kernelCounts) *float64 { return &k.Polls }},
	{"syscalls:sys_enter_futex", func(k *kernelCounts) *float64 { return &k.Futex }},
	{"context-switches", func(k *kernelCounts) *float64 { return &k.Switches }},
}

// perfStat starts counting the events of the processes pids (perf stat,
// which needs root or perf_event_paranoid <= 0 for the tracepoints); the
// returned function stops it and returns the counts.
func perfStat(pids []int) (func() (kernelCounts, error), error) {
	ids := make([]string, len(pids))
	for i, p := range pids {
		ids[i] = strconv.Itoa(p)
	}
	events := make([]string, len(perfEvents))
	for i, e := range perfEvents {
		events[i] = e.event
	}
	cmd := exec.Command("perf", "stat", "-x", ",", "--no-big-num", "-e", strings.Join(events, ","), "-p", strings.Join(ids, ","))
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf stat: %w", err)
	}
	// perf attaches to the threads before it counts; a load starting at
	// once would lose its first requests' events.
	time.Sleep(200 * time.Millisecond)
	return func() (kernelCounts, error) {
		_ = cmd.Process.Signal(syscall.SIGINT)
		waitErr := cmd.Wait()
		k, err := parsePerfStat(out.String())
		if err != nil {
			return k, fmt.Errorf("perf stat (%v): %w: %s", waitErr, err, out.String())
		}
		return k, nil
	}, nil
}

// parsePerfStat reads perf stat's CSV lines: value,unit,event,...
func parsePerfStat(s string) (kernelCounts, error) {
	var k kernelCounts
	found := 0
	for line := range strings.Lines(s) {
		fields := strings.Split(strings.TrimSpace(line), ",")
		if len(fields) < 3 {
			continue
		}
		for _, e := range perfEvents {
			if fields[2] != e.event {
				continue
			}
			v, err := strconv.ParseFloat(fields[0], 64)
			if err != nil {
				// "<not counted>" or "<not supported>": that kind stays 0.
				continue
			}
			*e.kind(&k) += v
			found++
		}
	}
	if found == 0 {
		return k, fmt.Errorf("no counts in the output")
	}
	return k, nil
}

// perRequest divides the counts by the answered requests of a run.
func (k kernelCounts) perRequest(ok int) kernelCounts {
	if ok == 0 {
		return kernelCounts{}
	}
	n := float64(ok)
	return kernelCounts{k.Syscalls / n, k.Reads / n, k.Writes / n, k.Polls / n, k.Futex / n, k.Switches / n}
}

// measured runs a load with the proxy's CPU time counted, and its system
// calls and context switches too when perf is on.
func measured(pid int, perf bool, logf func(string, ...any), load func() loadResult) loadResult {
	var stop func() (kernelCounts, error)
	if perf {
		var err error
		if stop, err = perfStat(processTree(pid)); err != nil {
			logf("%v", err)
		}
	}
	r := withCPU(pid, load)
	if stop != nil {
		k, err := stop()
		if err != nil {
			logf("%v", err)
		} else {
			r.Kernel = k.perRequest(r.OK)
		}
	}
	return r
}

// kernelReport formats the counts per request of every kept-alive run.
func kernelReport(results []result) string {
	var b strings.Builder
	b.WriteString("\nPer request, counted by perf stat over each run (system calls all, reads, writes, epoll waits, futex; context switches):\n\n")
	b.WriteString("| peer | round | run | syscalls | reads | writes | epoll | futex | context switches |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Ready == 0 {
			continue
		}
		for _, run := range []struct {
			name string
			l    loadResult
		}{{"plain HTTP/1.1", r.Plain}, {"HTTPS/1.1", r.Requests}, {"HTTP/2", r.H2}, {"paced", r.Paced}} {
			k := run.l.Kernel
			fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.Peer, r.Round, run.name,
				k.Syscalls, k.Reads, k.Writes, k.Polls, k.Futex, k.Switches)
		}
	}
	return b.String()
}

// perfUsable reports whether perf stat can count system calls here.
func perfUsable() error {
	out, err := exec.Command("perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "--", "true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("perf stat cannot count system calls: %v: %s", err, out)
	}
	return nil
}
