package proxy

import (
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
)

// cutWithin begins a write on p that never ends and reports whether the
// watchdog cut it within limit.
func cutWithin(p *pacer, limit time.Duration) bool {
	p.write.begin(time.Now(), p.idle, 0, 0, 0)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if p.cut.Load() != nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// TestPacerTimerKeptAcrossRequests: a pooled pacer's watchdog timer stays
// armed from one request to the next (no timer change per request), and
// every request is still cut within its idle timeout: one right after an
// earlier request, one after a pause past the timer's firing, and one
// after the idle timeout shrank below what the armed timer waits for.
func TestPacerTimerKeptAcrossRequests(t *testing.T) {
	p := &pacer{log: zap.NewNop()}
	long := &Options{ClientIdleTimeout: time.Hour}
	short := &Options{ClientIdleTimeout: 100 * time.Millisecond}

	p.start(httptest.NewRecorder(), short, time.Now())
	p.stop()
	fires := p.fires
	p.start(httptest.NewRecorder(), short, time.Now())
	if !p.armed || p.fires != fires {
		t.Fatalf("the armed timer was set again for the next request (armed %v, fires moved by %v)",
			p.armed, time.Duration(p.fires-fires))
	}
	if !cutWithin(p, 2*time.Second) {
		t.Fatal("a stalled write on the second request was not cut")
	}
	p.stop()

	// A pause past the timer: its watch finds the pacer done and disarms.
	time.Sleep(300 * time.Millisecond)
	p.mu.Lock()
	armed := p.armed
	p.mu.Unlock()
	if armed {
		t.Fatal("the timer of an idle pacer is still marked armed after it fired")
	}
	p.start(httptest.NewRecorder(), short, time.Now())
	if !cutWithin(p, 2*time.Second) {
		t.Fatal("a stalled write after a pause was not cut")
	}
	p.stop()

	// Armed for an hour (once the last timer fired), then the idle
	// timeout shrinks.
	time.Sleep(300 * time.Millisecond)
	p.start(httptest.NewRecorder(), long, time.Now())
	if p.fires < time.Now().Add(time.Minute).UnixNano() {
		t.Fatal("the timer was not armed for the hour")
	}
	p.stop()
	p.start(httptest.NewRecorder(), short, time.Now())
	start := time.Now()
	if !cutWithin(p, 2*time.Second) {
		t.Fatal("a stalled write was not cut after the idle timeout shrank")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("cut after %v with an idle timeout of 100ms", d)
	}
	p.stop()
	p.release()
	if p.armed {
		t.Fatal("release left the timer armed")
	}
}
