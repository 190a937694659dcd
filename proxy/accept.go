package proxy

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Retries of a failing accept, spaced as net/http's Server.Serve spaces
// them: a port must outlive any error but its listener being closed, and
// a process out of file descriptors must not spin on accept(2).
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// acceptUnreadyAfter is how long a port's accepts may fail before the
// runtime reports it not ready: longer than a burst of connections that
// briefly exhausts the file descriptors and is shed, short enough that
// a load balancer stops sending clients that would only time out.
const acceptUnreadyAfter = 2 * time.Second

// shedBatch is how many of the oldest idle keep-alive connections are
// closed each time an accept fails for want of file descriptors: enough
// for a few waiting clients per retry, few enough that clients merely
// between two requests are not cut by the hundred.
const shedBatch = 32

// acceptBackoff is the wait before the next try of a failing accept.
type acceptBackoff struct{ delay time.Duration }

// next doubles the wait, from acceptRetryMin up to acceptRetryMax.
func (b *acceptBackoff) next() time.Duration {
	b.delay = min(max(2*b.delay, acceptRetryMin), acceptRetryMax)
	return b.delay
}

func (b *acceptBackoff) reset() { b.delay = 0 }

// sleep waits d, or until done is closed; it reports whether d passed.
func sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// isFileLimit reports whether err is the process (EMFILE) or the system
// (ENFILE) having no file descriptor left for a new connection.
func isFileLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// acceptHealth is what a port's accept loop reports of its failures, for
// readiness: a port that cannot accept gets no new clients, however well
// it serves those it has.
type acceptHealth struct {
	// failingSince is the first failure of the current streak, last the
	// latest failure (Unix ns); 0 while accepts succeed.
	failingSince atomic.Int64
	last         atomic.Int64
	lastErr      atomic.Pointer[string]
}

// failed records a failed accept and reports whether it began a streak.
func (h *acceptHealth) failed(err error, now time.Time) bool {
	msg := err.Error()
	h.lastErr.Store(&msg)
	h.last.Store(now.UnixNano())
	return h.failingSince.CompareAndSwap(0, now.UnixNano())
}

// accepted records a successful accept; it returns how long the streak of
// failures it ends lasted, 0 when there was none.
func (h *acceptHealth) accepted(now time.Time) time.Duration {
	if h.failingSince.Load() == 0 { // the common case: one atomic load
		return 0
	}
	since := h.failingSince.Swap(0)
	if since == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, since))
}

// check returns why the port cannot accept, nil when it can. A streak
// counts once it lasted acceptUnreadyAfter; it is over when an accept
// succeeded or, since a failing accept is retried at least every
// acceptRetryMax, when none failed for longer than that (the accept then
// waits for a client without failing: the port can accept again, though
// no client came to prove it).
func (h *acceptHealth) check(now time.Time, after time.Duration) error {
	since := h.failingSince.Load()
	if since == 0 {
		return nil
	}
	if now.Sub(time.Unix(0, h.last.Load())) > acceptRetryMax+acceptRetryMax/2 {
		return nil
	}
	failing := now.Sub(time.Unix(0, since))
	if failing < after {
		return nil
	}
	msg := ""
	if p := h.lastErr.Load(); p != nil {
		msg = *p
	}
	return fmt.Errorf("cannot accept connections for %v: %s", failing.Round(time.Millisecond), msg)
}

// acceptLoop takes the port's connections from the socket and sorts each
// on a goroutine of its own. It ends only when the listener is closed
// (shutdown, port removed); any other error is retried after a backoff,
// and a process out of file descriptors first sheds idle connections.
func (s *sorter) acceptLoop() {
	ps := s.ps
	var backoff acceptBackoff
	for {
		c, err := s.Listener.Accept()
		if err == nil {
			backoff.reset()
			if d := ps.health.accepted(time.Now()); d > 0 {
				ps.log.Info("port accepting connections again", zap.Duration("failed_for", d))
			}
			go s.accepted(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			s.errc <- err
			return
		}
		delay := backoff.next()
		first := ps.health.failed(err, time.Now())
		shed := 0
		if isFileLimit(err) {
			shed = ps.rt.shedIdle(shedBatch)
		}
		// Once per streak and then about once a second: the retries are
		// spaced by at most that.
		if first || delay == acceptRetryMax {
			ps.log.Error("accepting a connection failed; retrying", zap.Error(err),
				zap.Duration("retry_in", delay), zap.Int("idle_connections_closed", shed))
		}
		if !sleep(delay, s.done) {
			s.errc <- net.ErrClosed
			return
		}
	}
}

// shedIdle closes up to about n of the kept-alive HTTP/1 connections that
// have waited longest for their next request, over every port of the
// runtime (the file descriptors are the process's), and reports how many
// it closed. Their clients lose nothing in flight: they open a new
// connection for their next request, as after an idle timeout.
func (rt *Runtime) shedIdle(n int) int {
	rt.mu.Lock()
	servers := make([]*portServer, 0, len(rt.ports)+len(rt.draining))
	for _, ps := range rt.ports {
		servers = append(servers, ps)
	}
	for ps := range rt.draining {
		servers = append(servers, ps)
	}
	rt.mu.Unlock()
	var idle []int64
	for _, ps := range servers {
		idle = ps.appendIdle(idle)
	}
	if len(idle) == 0 {
		return 0
	}
	// The n-th oldest idle time is the cut: those idle since then or
	// before go (a few more on equal times).
	slices.Sort(idle)
	cut := idle[min(n, len(idle))-1]
	closed := 0
	for _, ps := range servers {
		closed += ps.closeIdleSince(cut)
	}
	return closed
}

// appendIdle appends when each of the port's kept-alive HTTP/1
// connections waiting for its next request went idle (Unix ns).
func (ps *portServer) appendIdle(dst []int64) []int64 {
	return ps.h1.AppendIdle(dst)
}

// closeIdleSince closes the port's kept-alive HTTP/1 connections idle
// since before or at since (Unix ns) and reports how many.
func (ps *portServer) closeIdleSince(since int64) int {
	return ps.h1.CloseIdleSince(since)
}

// Ready reports whether every port bound can accept connections: nil
// when so, otherwise which cannot and why (the body of a failing /readyz).
func (rt *Runtime) Ready() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	now := time.Now()
	var bad []string
	for key, ps := range rt.ports {
		if err := ps.health.check(now, rt.acceptUnreadyAfter); err != nil {
			bad = append(bad, fmt.Sprintf("port %s %v", key, err))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return errors.New(strings.Join(bad, "; "))
}
