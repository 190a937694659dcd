//go:build unix

package filesource

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A FIFO named like a configuration file is refused, on a full read and
// when the watch names it, instead of waiting for ever for a writer; the
// configuration stays the last good one until it is gone.
func TestWatchFIFORefused(t *testing.T) {
	dir := t.TempDir()
	d := fileDir{t, dir}
	d.put("a.yaml", routeYAML("r1", "/v1"))
	fifo := filepath.Join(dir, "x.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	snapshot := func(s *Source) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := s.Snapshot()
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			// Let the blocked read end, so the test stops by itself.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			t.Fatal("Snapshot blocked on a FIFO")
			return nil
		}
	}
	if err := snapshot(New(dir, zap.NewNop())); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("full read with a FIFO: %v, want it refused", err)
	}

	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	s := watched(dir)
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	s.saw("x.yaml")
	if err := snapshot(s); err == nil {
		t.Error("a FIFO named by the watch was accepted")
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Errorf("after the FIFO is gone: %s, want /v1", got)
	}
}
