package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// curves is the key exchange the client offers: X25519 alone. Go servers
// (Portico, caddy) would otherwise agree on the post-quantum hybrid
// X25519MLKEM768 with this Go client, which the OpenSSL of nginx and
// haproxy does not offer, and every handshake would cost them, and the
// client on the same cores, more for a reason that is not the proxy.
func curves() []tls.CurveID { return []tls.CurveID{tls.X25519} }

// client reaches one proxy on addr for any of the sites, checking that the
// certificate served is the site's own.
type client struct {
	addr   string
	plain  string            // the same sites' plain HTTP address; "" when not served
	leafs  map[string][]byte // host -> leaf DER
	exited <-chan struct{}   // closed when the proxy has exited
}

// get does one full TLS handshake (no resumption) with host as SNI, then one
// HTTP/1.1 GET on that connection, and checks the leaf and a 200.
func (c *client) get(ctx context.Context, host string) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	// Closed with a reset: thousands of connections a second would
	// otherwise fill loopback's port range with TIME_WAIT sockets, and
	// connects would stall on them whichever proxy is measured.
	_ = raw.(*net.TCPConn).SetLinger(0)
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	// The leaf is compared byte for byte below, which is cheaper for this
	// client than verifying the chain: the load generator shares the cores
	// with the proxy under test.
	conn := tls.Client(raw, &tls.Config{ServerName: host, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, CurvePreferences: curves()}) //nolint:gosec // leaf compared below
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("%s: handshake: %w", host, err)
	}
	if err := c.checkLeaf(host, conn.ConnectionState()); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", host, resp.StatusCode)
	}
	return nil
}

func (c *client) checkLeaf(host string, st tls.ConnectionState) error {
	if len(st.PeerCertificates) == 0 {
		return fmt.Errorf("%s: no certificate", host)
	}
	if want := c.leafs[host]; !bytes.Equal(st.PeerCertificates[0].Raw, want) {
		return fmt.Errorf("%s: served the certificate of %v", host, st.PeerCertificates[0].DNSNames)
	}
	return nil
}

// keepAlive returns an HTTP client that keeps one TLS connection to host.
func (c *client) keepAlive(host string) *http.Client {
	return oneConnection(c.addr, &tls.Config{ServerName: host, InsecureSkipVerify: true, CurvePreferences: curves()}) //nolint:gosec // leaf compared per response
}

// plainKeepAlive returns an HTTP client that keeps one plain connection to
// host's site.
func (c *client) plainKeepAlive(_ string) *http.Client {
	return oneConnection(c.plain, nil)
}

// oneConnection returns an HTTP client that keeps one connection to addr,
// with TLS when tlsConf is set.
func oneConnection(addr string, tlsConf *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			TLSClientConfig: tlsConf,
			MaxConnsPerHost: 1,
		},
	}
}

// waitServed polls host until it is served with its own certificate, and
// returns how long that took from start.
func (c *client) waitServed(host string, start time.Time, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		select {
		case <-c.exited:
			return 0, fmt.Errorf("the proxy exited; last error: %w", last)
		default:
		}
		attempt, stop := context.WithTimeout(ctx, 2*time.Second)
		last = c.get(attempt, host)
		stop()
		if last == nil {
			return time.Since(start), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s not served after %v: %w", host, timeout, last)
}

// loadResult is one load run.
type loadResult struct {
	OK, Failed int
	Elapsed    time.Duration
	P50, P99   time.Duration
	P999       time.Duration
	FirstErr   error
	// CPU is the time the proxy's processes used during the run.
	CPU time.Duration
	// Kernel is what the kernel counted per request (-perf-stat).
	Kernel kernelCounts
}

// cpuPer100k is CPU seconds per 100,000 answered requests; 0 when unknown.
func (r loadResult) cpuPer100k() float64 {
	if r.OK == 0 || r.CPU <= 0 {
		return 0
	}
	return r.CPU.Seconds() * 100000 / float64(r.OK)
}

func (r loadResult) rate() float64 { return float64(r.OK) / r.Elapsed.Seconds() }

// handshakes runs conns workers for d, each doing new-connection requests
// (full handshake, one GET, close) to random sites.
func (c *client) handshakes(hosts []string, conns int, d time.Duration) loadResult {
	return drive(conns, d, func(ctx context.Context, r *rand.Rand) error {
		return c.get(ctx, hosts[r.IntN(len(hosts))])
	})
}

// requests runs conns workers for d, each with one kept-alive HTTP/1.1
// connection over TLS to a random site, sending GETs one after another.
func (c *client) requests(hosts []string, conns int, d time.Duration) loadResult {
	return drive(conns, d, c.keptAlive(hosts, conns, c.keepAlive, "https"))
}

// plainRequests is requests over plain HTTP/1.1.
func (c *client) plainRequests(hosts []string, conns int, d time.Duration) loadResult {
	return drive(conns, d, c.keptAlive(hosts, conns, c.plainKeepAlive, "http"))
}

// h2Requests runs conns*streams workers for d over conns HTTP/2
// connections (TLS, ALPN h2), streams requests in flight on each.
func (c *client) h2Requests(hosts []string, conns, streams int, d time.Duration) loadResult {
	clients := make([]*http.Client, conns)
	names := make([]string, conns)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range clients {
		names[i] = hosts[r.IntN(len(hosts))]
		clients[i] = c.h2Client(names[i])
	}
	var next atomic.Int64
	return drive(conns*streams, d, func(ctx context.Context, _ *rand.Rand) error {
		i := int(next.Add(1)) % conns
		return c.getOn(ctx, clients[i], "https", names[i], 2)
	})
}

// paced sends GETs over conns kept-alive TLS connections at a fixed rate
// for d, whatever the answers' pace (open loop): each request's latency is
// counted from when it was due, so time spent waiting for a free
// connection behind a slow answer counts too. The connections are opened
// first, with one untimed request each: the run measures kept-alive
// requests, and 16 handshakes due at its start would be its slowest
// percent at 1,000 requests a second. A failed warm-up request counts as
// a failure of the run.
func (c *client) paced(hosts []string, conns, rate int, d time.Duration) loadResult {
	op := c.keptAlive(hosts, conns, c.keepAlive, "https")
	var all tally
	warm, cancelWarm := context.WithTimeout(context.Background(), 10*time.Second)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var mine tally
			if err := op(warm, nil); err != nil {
				mine.record(err, time.Now())
			}
			all.add(&mine)
		})
	}
	wg.Wait()
	cancelWarm()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	end := start.Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(10*time.Second))
	defer cancel()
	var next atomic.Int64
	for range conns {
		wg.Go(func() {
			var mine tally
			for {
				due := start.Add(time.Duration(next.Add(1)-1) * interval)
				if !due.Before(end) {
					break
				}
				time.Sleep(time.Until(due))
				mine.record(op(ctx, nil), due)
			}
			all.add(&mine)
		})
	}
	wg.Wait()
	return all.result(time.Since(start))
}

// keptAlive returns an operation that GETs over one of conns kept-alive
// connections (each to a random site, made by newClient), checking the
// answer.
func (c *client) keptAlive(hosts []string, conns int, newClient func(string) *http.Client, scheme string) func(context.Context, *rand.Rand) error {
	type conn struct {
		hc   *http.Client
		host string
	}
	pool := make(chan conn, conns)
	r := rand.New(rand.NewPCG(7, 7))
	for range conns {
		h := hosts[r.IntN(len(hosts))]
		pool <- conn{newClient(h), h}
	}
	return func(ctx context.Context, _ *rand.Rand) error {
		// As many connections as workers: a worker always finds one idle.
		k := <-pool
		defer func() { pool <- k }()
		return c.getOn(ctx, k.hc, scheme, k.host, 1)
	}
}

// getOn GETs / of host with hc and checks the answer: 200, the protocol
// major version proto, and over TLS the site's own certificate.
func (c *client) getOn(ctx context.Context, hc *http.Client, scheme, host string, proto int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+"/", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: status %d", host, resp.StatusCode)
	case resp.ProtoMajor != proto:
		return fmt.Errorf("%s: answered over %s", host, resp.Proto)
	case scheme == "http":
		return nil
	case resp.TLS == nil:
		return errors.New("not TLS")
	}
	return c.checkLeaf(host, *resp.TLS)
}

// h2Client returns an HTTP client that speaks HTTP/2 over one TLS
// connection to host's site.
func (c *client) h2Client(host string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, c.addr)
			},
			TLSClientConfig:   &tls.Config{ServerName: host, InsecureSkipVerify: true, CurvePreferences: curves(), NextProtos: []string{"h2"}}, //nolint:gosec // leaf compared per response
			ForceAttemptHTTP2: true,
			MaxConnsPerHost:   1,
		},
	}
}

// drive runs op from conns goroutines until d has passed and collects
// latencies.
func drive(conns int, d time.Duration, op func(context.Context, *rand.Rand) error) loadResult {
	start := time.Now()
	end := start.Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var all tally
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var mine tally
			// The end is read from the clock: ctx's own cancellation can
			// lag its deadline on busy cores, and operations that fail at
			// once on the passed deadline are not failures of the proxy.
			for time.Now().Before(end) {
				t := time.Now()
				err := op(ctx, r)
				if !time.Now().Before(end) {
					break
				}
				mine.record(err, t)
			}
			all.add(&mine)
		})
	}
	wg.Wait()
	return all.result(time.Since(start))
}

// tally counts one load's answers: each worker keeps its own and adds it
// to the run's once, at its end.
type tally struct {
	mu       sync.Mutex
	ok       int
	failed   int
	firstErr error
	lat      []time.Duration
}

// record counts one operation that ended now, timed from since.
func (t *tally) record(err error, since time.Time) {
	if err != nil {
		t.failed++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	t.ok++
	t.lat = append(t.lat, time.Since(since))
}

func (t *tally) add(o *tally) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ok += o.ok
	t.failed += o.failed
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
	t.lat = append(t.lat, o.lat...)
}

func (t *tally) result(elapsed time.Duration) loadResult {
	res := loadResult{OK: t.ok, Failed: t.failed, FirstErr: t.firstErr, Elapsed: elapsed}
	res.setPercentiles(t.lat)
	return res
}

func (r *loadResult) setPercentiles(lat []time.Duration) {
	slices.Sort(lat)
	if len(lat) > 0 {
		r.P50 = lat[len(lat)/2]
		r.P99 = lat[len(lat)*99/100]
		r.P999 = lat[len(lat)*999/1000]
	}
}

// memoryOf returns the proportional set size (PSS) of pid and all its
// descendants in bytes: forked workers share pages with their master, and
// PSS counts each shared page once in all.
func memoryOf(pid int) (int64, error) {
	var total int64
	for i, p := range processTree(pid) {
		pss, err := pssOf(p)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			continue // exited meanwhile
		}
		total += pss
	}
	return total, nil
}

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ),
// 100 on every Linux architecture Go runs on.
const clockTicks = 100

// cpuOf returns the user and system CPU time pid and all its descendants
// have used (the threads of each, not the children they waited for).
func cpuOf(pid int) (time.Duration, error) {
	var total time.Duration
	for i, p := range processTree(pid) {
		fields, err := statFields(p)
		if err != nil || len(fields) < 13 {
			if i == 0 {
				return 0, fmt.Errorf("cpu of %d: %v", pid, err)
			}
			continue
		}
		// utime and stime, fields 14 and 15 of stat, 12 and 13 after the
		// command name.
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		total += time.Duration(utime+stime) * time.Second / clockTicks
	}
	return total, nil
}

// statFields returns the fields of /proc/PID/stat after the command name,
// which is in parentheses and may hold spaces.
func statFields(pid int) ([]string, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(stat)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
}

// processTree returns pid and its descendants, pid first.
func processTree(pid int) []int {
	children := map[int][]int{}
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			// The parent pid is the second field after the name.
			if fields, err := statFields(p); err == nil && len(fields) >= 2 {
				ppid, _ := strconv.Atoi(fields[1])
				children[ppid] = append(children[ppid], p)
			}
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

func pssOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pss of %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("pss of %d: no Pss line", pid)
}
