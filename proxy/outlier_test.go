package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

func outlierEndpoints(n int) *config.Endpoints {
	var addrs []string
	for i := range n {
		addrs = append(addrs, "10.0.0."+strconv.Itoa(i+1)+":80")
	}
	return config.NewEndpoints(addrs...)
}

// TestOutlierThresholds: each count ejects at its own threshold and only
// in a row: a success, or another kind of failure for the local count,
// starts it again; a gateway error is a 5xx too.
func TestOutlierThresholds(t *testing.T) {
	eps := outlierEndpoints(10)
	a := eps.Addrs[0]
	now := time.Unix(1000, 0)
	od := &config.OutlierDetection{Consecutive5xx: 3, ConsecutiveGatewayErrors: 2, ConsecutiveLocalOriginFailures: 4, BaseEjectionTime: time.Second, MaxEjectionPercent: 50}
	seq := func(o *outlierSet, results ...attemptResult) (ejectedAt int) {
		for i, r := range results {
			if d := o.observe(od, eps, a, r, now); d > 0 {
				return i + 1
			}
		}
		return 0
	}
	for _, tc := range []struct {
		name    string
		results []attemptResult
		want    int
	}{
		{"three 5xx", []attemptResult{attempt5xx, attempt5xx, attempt5xx}, 3},
		{"5xx broken by a success", []attemptResult{attempt5xx, attempt5xx, attemptOK, attempt5xx, attempt5xx}, 0},
		{"two gateway errors", []attemptResult{attemptGateway, attemptGateway}, 2},
		{"gateway errors count as 5xx", []attemptResult{attemptGateway, attempt5xx, attempt5xx}, 3},
		{"a 5xx breaks gateway errors", []attemptResult{attemptGateway, attempt5xx, attemptGateway}, 3},
		{"four local failures", []attemptResult{attemptLocal, attemptLocal, attemptLocal, attemptLocal}, 4},
		{"an answer breaks local failures", []attemptResult{attemptLocal, attemptLocal, attemptLocal, attempt5xx, attemptLocal}, 0},
		{"successes only", []attemptResult{attemptOK, attemptOK, attemptOK, attemptOK, attemptOK}, 0},
	} {
		if got := seq(&outlierSet{}, tc.results...); got != tc.want {
			t.Errorf("%s: ejected after %d results, want %d", tc.name, got, tc.want)
		}
	}
}

// TestOutlierGrowingEjection: an endpoint ejected again as soon as it is
// back stays out twice, then three times as long; after it answers well
// once back, the next ejection is one base again. The time is capped.
func TestOutlierGrowingEjection(t *testing.T) {
	eps := outlierEndpoints(10)
	a := eps.Addrs[0]
	od := &config.OutlierDetection{Consecutive5xx: 1, BaseEjectionTime: time.Second, MaxEjectionPercent: 10}
	var o outlierSet
	now := time.Unix(1000, 0)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		d := o.observe(od, eps, a, attempt5xx, now)
		if d != want {
			t.Fatalf("ejection %d: %s, want %s", i+1, d, want)
		}
		if !o.ejected(a, now.Add(d-time.Millisecond)) || o.ejected(a, now.Add(d)) {
			t.Fatalf("ejection %d: not out for exactly %s", i+1, d)
		}
		now = now.Add(d)
	}
	o.observe(od, eps, a, attemptOK, now)
	if d := o.observe(od, eps, a, attempt5xx, now); d != time.Second {
		t.Errorf("after a success: ejected for %s, want 1s", d)
	}
	long := &config.OutlierDetection{Consecutive5xx: 1, BaseEjectionTime: 4 * time.Minute, MaxEjectionPercent: 10}
	var p outlierSet
	now = time.Unix(5000, 0)
	p.observe(long, eps, a, attempt5xx, now)
	if d := p.observe(long, eps, a, attempt5xx, now.Add(4*time.Minute)); d != config.MaxEjectionTime {
		t.Errorf("second ejection of 4m: %s, want the cap %s", d, config.MaxEjectionTime)
	}
}

// TestOutlierShare: with every endpoint failing, no more than the share
// (rounded down) is ejected at once; with 10% of fewer than 10, none.
func TestOutlierShare(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		endpoints, percent, want int
	}{{10, 10, 1}, {10, 50, 5}, {4, 50, 2}, {9, 10, 0}, {3, 100, 3}} {
		eps := outlierEndpoints(tc.endpoints)
		od := &config.OutlierDetection{Consecutive5xx: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: int32(tc.percent)}
		var o outlierSet
		for range 3 {
			for _, a := range eps.Addrs {
				o.observe(od, eps, a, attempt5xx, now)
			}
		}
		out := 0
		for _, a := range eps.Addrs {
			if o.ejected(a, now) {
				out++
			}
		}
		if out != tc.want {
			t.Errorf("%d endpoints, %d%%: %d ejected, want %d", tc.endpoints, tc.percent, out, tc.want)
		}
	}
}

// TestOutlierSuccessCostsNothing: a success with no record anywhere takes
// no lock and leaves no record.
func TestOutlierSuccessCostsNothing(t *testing.T) {
	var o outlierSet
	eps := outlierEndpoints(3)
	od := &config.OutlierDetection{Consecutive5xx: 1, BaseEjectionTime: time.Second, MaxEjectionPercent: 100}
	o.mu.Lock() // a success that took the lock would block here
	o.observe(od, eps, eps.Addrs[0], attemptOK, time.Now())
	o.mu.Unlock()
	if o.records.Load() != 0 || len(o.hosts) != 0 {
		t.Errorf("records after successes: %d", o.records.Load())
	}
}

// outlierConfig is one rule over Service svc with od as its passive
// health check and round robin, with endpoints addrs.
func outlierConfig(t *testing.T, port int, od *config.OutlierDetection, addrs []string) *config.Config {
	t.Helper()
	in := oneListener([]*gwv1.HTTPRoute{ruleRoute("svc", gwv1.HTTPRouteRule{})}, httpService("svc", routing.Service{Outlier: od}))
	return onePortConfig(port, compileOne(t, in).Tables[0], nil, map[string][]string{"svc": addrs})
}

// statusBackend answers code, naming itself, and counts its requests.
func statusBackend(t *testing.T, name string, code int) (string, *atomic.Int64) {
	var n atomic.Int64
	return serveBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(code)
		io.WriteString(w, name)
	})), &n
}

// TestOutlierEjectsOnSockets: among four endpoints, one answering 500 gets
// exactly its threshold of requests (3) of 200, then none while it is
// out (2 s), and requests again once its ejection ends; one that resets
// every connection after reading the request (local-origin failures) gets
// its threshold of requests (2) and no more;
// with every endpoint answering 503, half stay in (maxEjectionPercent 50)
// and their answers still reach the client.
func TestOutlierEjectsOnSockets(t *testing.T) {
	get := func(c *http.Client, url string) int {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	c := keptAliveClient()

	t.Run("5xx", func(t *testing.T) {
		var addrs []string
		for i := range 3 {
			a, _ := statusBackend(t, "ok"+strconv.Itoa(i), 200)
			addrs = append(addrs, a)
		}
		bad, badN := statusBackend(t, "bad", 500)
		addrs = append(addrs, bad)
		// Long enough for 200 requests on a busy machine.
		od := &config.OutlierDetection{Consecutive5xx: 3, BaseEjectionTime: 2 * time.Second, MaxEjectionPercent: 50}
		rt := newRuntime(t)
		port := freePort(t)
		if err := rt.Apply(outlierConfig(t, port, od, addrs)); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/", port)
		fails := 0
		for range 200 {
			if get(c, url) != 200 {
				fails++
			}
		}
		if badN.Load() != 3 || fails != 3 {
			t.Fatalf("the failing endpoint got %d requests (%d failed answers), want 3", badN.Load(), fails)
		}
		time.Sleep(2100 * time.Millisecond)
		for range 40 {
			get(c, url)
		}
		if badN.Load() <= 3 {
			t.Errorf("the failing endpoint got no request after its ejection ended")
		}
	})

	t.Run("local origin", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		var dropped atomic.Int64
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					// The request reaches the endpoint, which resets the
					// connection without an answer.
					bufio.NewReader(conn).ReadString('\n')
					dropped.Add(1)
					conn.(*net.TCPConn).SetLinger(0)
					conn.Close()
				}()
			}
		}()
		var addrs []string
		for i := range 3 {
			a, _ := statusBackend(t, "ok"+strconv.Itoa(i), 200)
			addrs = append(addrs, a)
		}
		addrs = append(addrs, ln.Addr().String())
		od := &config.OutlierDetection{ConsecutiveLocalOriginFailures: 2, BaseEjectionTime: time.Minute, MaxEjectionPercent: 25}
		rt := newRuntime(t)
		port := freePort(t)
		if err := rt.Apply(outlierConfig(t, port, od, addrs)); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/", port)
		fails := 0
		for range 100 {
			if get(c, url) != 200 {
				fails++
			}
		}
		if dropped.Load() != 2 || fails > 2 {
			t.Errorf("the dropping endpoint got %d requests and %d failed, want 2 before it is out", dropped.Load(), fails)
		}
	})

	t.Run("share", func(t *testing.T) {
		var addrs []string
		var counts []*atomic.Int64
		for i := range 4 {
			a, n := statusBackend(t, "e"+strconv.Itoa(i), 503)
			addrs = append(addrs, a)
			counts = append(counts, n)
		}
		od := &config.OutlierDetection{Consecutive5xx: 2, BaseEjectionTime: time.Minute, MaxEjectionPercent: 50}
		rt := newRuntime(t)
		port := freePort(t)
		if err := rt.Apply(outlierConfig(t, port, od, addrs)); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/", port)
		for range 40 {
			if code := get(c, url); code != 503 {
				t.Fatalf("status %d, want the backends' 503", code)
			}
		}
		before := make([]int64, len(counts))
		for i, n := range counts {
			before[i] = n.Load()
		}
		for range 40 {
			get(c, url)
		}
		serving := 0
		for i, n := range counts {
			if n.Load() > before[i] {
				serving++
			}
		}
		if serving != 2 {
			t.Errorf("%d endpoints still get requests, want 2 of 4 (50%% ejected at most)", serving)
		}
	})
}
