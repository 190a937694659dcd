package main

import "testing"

// TestParsePerfStat reads perf stat's CSV output: kinds sum their system
// calls, uncounted events leave their kind at 0, other lines are skipped.
func TestParsePerfStat(t *testing.T) {
	out := `# started on Tue Nov 24 17:30:00 2026

1000,,raw_syscalls:sys_enter,5000000,100.00,,
200,,syscalls:sys_enter_read,5000000,100.00,,
50,,syscalls:sys_enter_recvfrom,5000000,100.00,,
<not counted>,,syscalls:sys_enter_readv,0,100.00,,
300,,syscalls:sys_enter_writev,5000000,100.00,,
40,,syscalls:sys_enter_epoll_wait,5000000,100.00,,
7,,syscalls:sys_enter_futex,5000000,100.00,,
90,,context-switches,5000000,100.00,,
`
	k, err := parsePerfStat(out)
	if err != nil {
		t.Fatal(err)
	}
	want := kernelCounts{Syscalls: 1000, Reads: 250, Writes: 300, Polls: 40, Futex: 7, Switches: 90}
	if k != want {
		t.Errorf("got %+v, want %+v", k, want)
	}
	if got := k.perRequest(100); got.Syscalls != 10 || got.Reads != 2.5 || got.Switches != 0.9 {
		t.Errorf("per request: %+v", got)
	}
	if _, err := parsePerfStat("perf: permission denied\n"); err == nil {
		t.Error("output without counts: no error")
	}
}
