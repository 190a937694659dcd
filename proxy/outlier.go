package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"portico.dev/portico/config"
)

// Passive health checks (config.OutlierDetection): the answers of real
// requests to an endpoint are counted, and one that fails a policy's
// threshold in a row is left out for a time that grows with each
// ejection in a row, while no more than the policy's share of its
// backend's endpoints are. Like downSet, the records are by address and
// outlive configuration changes.

// outlierSet holds the endpoints that failed lately. Only failing or
// ejected endpoints have a record: a success removes it.
type outlierSet struct {
	mu    sync.Mutex
	hosts map[string]*outlierRecord
	// records counts hosts, read without the lock by every success: with
	// none, a success costs nothing more.
	records atomic.Int32
	// latest is the last ejection's end (Unix nanoseconds): past it, no
	// endpoint is ejected and picks skip the lock.
	latest atomic.Int64
}

type outlierRecord struct {
	c5xx, gateway, local int32
	// ejections counts the ejections in a row: each lasts that many
	// times the base. until is the end of the current one.
	ejections int32
	until     time.Time
}

// attemptResult is how an attempt to an endpoint ended, for the counts.
type attemptResult uint8

const (
	attemptOK      attemptResult = iota
	attempt5xx                   // answered 500-599, not a gateway error
	attemptGateway               // answered 502, 503 or 504
	attemptLocal                 // no answer: refused, dropped, too slow
)

// resultOf classifies an attempt that got status (0: no answer).
func resultOf(status int) attemptResult {
	switch {
	case status == 0:
		return attemptLocal
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		return attemptGateway
	case status >= 500 && status <= 599:
		return attempt5xx
	}
	return attemptOK
}

// observe counts res for addr, an endpoint of eps, under od; it reports
// how long addr is now ejected for (0: it is not, or was already).
func (o *outlierSet) observe(od *config.OutlierDetection, eps *config.Endpoints, addr string, res attemptResult, now time.Time) time.Duration {
	if res == attemptOK && o.records.Load() == 0 {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rec := o.hosts[addr]
	if res == attemptOK {
		// An ejected endpoint that answers again (a request sent while
		// every other was out) keeps its count of ejections until it is
		// back and answering.
		if rec != nil && !now.Before(rec.until) {
			delete(o.hosts, addr)
			o.records.Add(-1)
		} else if rec != nil {
			rec.c5xx, rec.gateway, rec.local = 0, 0, 0
		}
		return 0
	}
	if rec == nil {
		if o.hosts == nil {
			o.hosts = map[string]*outlierRecord{}
		}
		rec = &outlierRecord{}
		o.hosts[addr] = rec
		o.records.Add(1)
	}
	if now.Before(rec.until) {
		return 0 // already out: a request sent while every other was
	}
	switch res {
	case attemptGateway:
		rec.gateway++
		rec.c5xx++ // a gateway error is a 5xx too
	case attempt5xx:
		rec.c5xx++
		rec.gateway = 0
	case attemptLocal:
		rec.local++
	}
	if res != attemptLocal {
		rec.local = 0
	}
	if !(reached(rec.c5xx, od.Consecutive5xx) || reached(rec.gateway, od.ConsecutiveGatewayErrors) ||
		reached(rec.local, od.ConsecutiveLocalOriginFailures)) {
		return 0
	}
	rec.c5xx, rec.gateway, rec.local = 0, 0, 0
	if !o.mayEject(od, eps, now) {
		return 0
	}
	rec.ejections++
	d := min(od.BaseEjectionTime*time.Duration(rec.ejections), max(config.MaxEjectionTime, od.BaseEjectionTime))
	rec.until = now.Add(d)
	if u := rec.until.UnixNano(); u > o.latest.Load() {
		o.latest.Store(u)
	}
	return d
}

func reached(n, threshold int32) bool { return threshold > 0 && n >= threshold }

// mayEject reports whether one more endpoint of eps may be ejected: the
// ejected ones stay within od's share of them, rounded down.
func (o *outlierSet) mayEject(od *config.OutlierDetection, eps *config.Endpoints, now time.Time) bool {
	allowed := len(eps.Addrs) * int(od.MaxEjectionPercent) / 100
	out := 0
	for _, a := range eps.Addrs {
		if rec := o.hosts[a]; rec != nil && now.Before(rec.until) {
			out++
		}
	}
	return out < allowed
}

// ejected reports whether addr is left out at now.
func (o *outlierSet) ejected(addr string, now time.Time) bool {
	if now.UnixNano() >= o.latest.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rec := o.hosts[addr]
	return rec != nil && now.Before(rec.until)
}

// any reports whether some endpoint may be ejected at now.
func (o *outlierSet) any(now time.Time) bool { return now.UnixNano() < o.latest.Load() }
