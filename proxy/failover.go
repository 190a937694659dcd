package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"portico.dev/portico/config"
)

// An endpoint that refused a connection (or could not be reached at all) is
// left out of the balancing for downFor, as long as its Service has others:
// a pod that is gone stays in the EndpointSlice for a few seconds, and
// without this every request picking it would fail. A request that can be
// sent again (no body, or a body Portico kept) then goes to another
// endpoint, at most maxFailover times, whatever the rule's retry policy.
const (
	downFor     = 5 * time.Second
	maxFailover = 2
)

// downSet remembers endpoints that failed to connect, until when they are
// left out. It is keyed by address, not by Endpoints: configs are rebuilt
// whenever endpoints change, and the failure must outlive that.
type downSet struct {
	mu    sync.Mutex
	until map[string]time.Time
	// latest is the last expiry in until (Unix nanoseconds), read
	// without the lock by every request: past it, nothing is down.
	latest atomic.Int64
}

// mark leaves addr out until downFor from now. It reports whether addr was
// up before, so that a failing endpoint is logged once per downFor, not
// once per request.
func (d *downSet) mark(addr string, now time.Time) (wasUp bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.until == nil {
		d.until = map[string]time.Time{}
	}
	t, ok := d.until[addr]
	wasUp = !ok || !now.Before(t)
	d.until[addr] = now.Add(downFor)
	// Forget what expired, so the map does not grow with endpoints that
	// have long been replaced.
	latest := int64(0)
	for a, t := range d.until {
		if !now.Before(t) {
			delete(d.until, a)
			continue
		}
		latest = max(latest, t.UnixNano())
	}
	d.latest.Store(latest)
	return wasUp
}

// isDown reports whether addr is left out at now.
func (d *downSet) isDown(addr string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.until[addr]
	return ok && now.Before(t)
}

// any reports whether some endpoint may be down at now; when none is,
// requests skip the checks and the lock.
func (d *downSet) any(now time.Time) bool {
	return now.UnixNano() < d.latest.Load()
}

// pickUp returns the next address of e that is not down, or the next
// address when all of them are (trying one beats failing every request),
// or "" when e has none.
func (down *downSet) pickUp(e *config.Endpoints, now time.Time) string {
	addr := e.Pick()
	if addr == "" || len(e.Addrs) == 1 || !down.any(now) {
		return addr
	}
	for range len(e.Addrs) {
		if !down.isDown(addr, now) {
			return addr
		}
		addr = e.Pick()
	}
	return addr
}

// hasUp reports whether e has an address other than except that is not
// down: somewhere to fail over to.
func (down *downSet) hasUp(e *config.Endpoints, except string, now time.Time) bool {
	if e == nil {
		return false
	}
	// Every request asks this: without endpoints down it costs no lock.
	if !down.any(now) {
		for _, a := range e.Addrs {
			if a != except {
				return true
			}
		}
		return false
	}
	for _, a := range e.Addrs {
		if a != except && !down.isDown(a, now) {
			return true
		}
	}
	return false
}

// unreachable reports whether err, the error of r, says its endpoint could
// not be connected to. A dial cut short because r's context ended (the
// client left, a timeout of the route fired) says nothing of the endpoint.
func unreachable(r *http.Request, err error) bool {
	return isDialError(err) && r.Context().Err() == nil &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
