package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStartLogsAndStops(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("sh", filepath.Join(dir, "sh.log"), "/bin/sh", []string{"GREETING=hello"}, "-c", `echo "$GREETING"; trap 'echo bye; exit 0' TERM; sleep 30 & wait`)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.LogTail(1<<10), "hello") {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed the environment: %q", p.LogTail(1<<10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if done, _ := p.Exited(); done {
		t.Fatal("exited early")
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); !done {
		t.Fatal("still running after Stop")
	}
	if !strings.Contains(p.LogTail(1<<10), "bye") {
		t.Errorf("SIGTERM handler did not run: %q", p.LogTail(1<<10))
	}
}

func TestKillAndTail(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("sleep", filepath.Join(dir, "sleep.log"), "/bin/sleep", nil, "30")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if done, err := p.Exited(); !done || err == nil {
		t.Errorf("after Kill: exited=%v err=%v, want a kill error", done, err)
	}
	path := filepath.Join(dir, "big.log")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 100)+"END"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := Tail(path, 3)
	if !strings.HasSuffix(got, "END") || !strings.Contains(got, "first 100 bytes left out") {
		t.Errorf("Tail = %q", got)
	}
}

func TestGroupStopsAllAndKeepsDirOnRequest(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "fixture")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		g := &Group{Dir: dir}
		a, err := g.Start("a", "/bin/sleep", nil, "30")
		if err != nil {
			t.Fatal(err)
		}
		b, err := g.Start("b", "/bin/sleep", nil, "30")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(g.Logs(100), "===== a (") || !strings.Contains(g.Logs(100), "===== b (") {
			t.Errorf("Logs does not name both processes: %q", g.Logs(100))
		}
		if keep {
			g.KeepDir()
		}
		if err := g.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := g.Stop(); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		for _, p := range []*Proc{a, b} {
			if done, _ := p.Exited(); !done {
				t.Errorf("%s still running after Stop", p.Name)
			}
		}
		if _, err := os.Stat(dir); (err == nil) != keep {
			t.Errorf("keep=%v: dir exists=%v", keep, err == nil)
		}
	}
}

// failedTest stands in for a testing.TB whose test has failed; it records
// what StopWhenDone does with it.
type failedTest struct {
	testing.TB
	failed   bool
	logs     []string
	cleanups []func()
}

func (f *failedTest) Failed() bool      { return f.failed }
func (f *failedTest) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failedTest) Logf(format string, a ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, a...))
}
func (f *failedTest) Errorf(format string, a ...any) {
	f.logs = append(f.logs, "ERROR "+fmt.Sprintf(format, a...))
}

func TestStopWhenDone(t *testing.T) {
	for _, failed := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "fixture")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		g := &Group{Dir: dir}
		p, err := g.Start("talker", "/bin/sh", nil, "-c", "echo the-last-words; sleep 30")
		if err != nil {
			t.Fatal(err)
		}
		for !strings.Contains(p.LogTail(100), "the-last-words") {
			time.Sleep(10 * time.Millisecond)
		}
		ft := &failedTest{failed: failed}
		g.StopWhenDone(ft, "fixture", 1<<10)
		if len(ft.cleanups) != 1 {
			t.Fatalf("%d cleanups registered, want 1", len(ft.cleanups))
		}
		ft.cleanups[0]()
		if done, _ := p.Exited(); !done {
			t.Errorf("failed=%v: the process outlived the test", failed)
		}
		_, statErr := os.Stat(dir)
		logged := strings.Join(ft.logs, "\n")
		switch {
		case failed && (statErr != nil || !strings.Contains(logged, "the-last-words") || !strings.Contains(logged, dir)):
			t.Errorf("failed test: dir kept %v, logged %q", statErr == nil, logged)
		case !failed && (statErr == nil || logged != ""):
			t.Errorf("passed test: dir kept %v, logged %q", statErr == nil, logged)
		}
	}
}
