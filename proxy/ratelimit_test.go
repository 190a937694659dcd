package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// limitedConfig is one rule to backend under rate limit rl, on a listener
// with client (nil: none).
func limitedConfig(t testing.TB, port int, rl *config.RateLimit, client *config.ClientTraffic, backend string) *config.Config {
	t.Helper()
	in := oneListener([]*gwv1.HTTPRoute{ruleRoute("svc", gwv1.HTTPRouteRule{})}, httpService("svc", routing.Service{}))
	in.Traffic = func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic {
		return config.RuleTraffic{RateLimit: rl}
	}
	return onePortConfig(port, compileOne(t, in).Tables[0], client, map[string][]string{"svc": {backend}})
}

func startLimited(t *testing.T, rl *config.RateLimit, client *config.ClientTraffic) *balanced {
	backend := slowBackend(t, "ok")
	return startBalanced(t, func(port int) *config.Config { return limitedConfig(t, port, rl, client, backend) })
}

// send sends a GET with headers h through c; status and headers.
func (p *balanced) send(c *http.Client, h map[string]string) (int, http.Header) {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		p.t.Fatalf("GET: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestRateLimitAnswers429: once a key's burst is used, its requests get
// 429 with Retry-After and the draft's RateLimit-Policy and RateLimit
// headers; other keys (client addresses as detected, header values) have
// buckets of their own; a whole-target limit is one bucket for all.
func TestRateLimitAnswers429(t *testing.T) {
	c := keptAliveClient()
	byClient := startLimited(t, &config.RateLimit{ID: "a", Requests: 60, Per: time.Hour, Burst: 3, Key: config.RateLimitByClient, MaxKeys: 100},
		&config.ClientTraffic{Address: &config.ClientAddress{Header: "X-Real-Ip"}})
	for i := range 3 {
		if code, _ := byClient.send(c, map[string]string{"X-Real-IP": "198.51.100.1"}); code != 200 {
			t.Fatalf("request %d of a burst of 3: %d", i+1, code)
		}
	}
	code, h := byClient.send(c, map[string]string{"X-Real-IP": "198.51.100.1"})
	if code != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d, want 429", code)
	}
	// One token a minute: the next comes in at most 60 s, the bucket is
	// full again in at most 180 s.
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want 1-60 seconds", h.Get("Retry-After"))
	}
	if got := h.Get("RateLimit-Policy"); got != `"local";q=60;w=3600` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"local";r=0;t=`) {
		t.Errorf("RateLimit %q, want r=0", got)
	}
	if code, _ := byClient.send(c, map[string]string{"X-Real-IP": "198.51.100.2"}); code != 200 {
		t.Errorf("another client: %d, want 200 (a bucket of its own)", code)
	}

	byHeader := startLimited(t, &config.RateLimit{ID: "b", Requests: 1, Per: time.Hour, Burst: 1, Key: config.RateLimitByHeader, Header: "X-Api-Key"}, nil)
	for key, want := range map[string][]int{"k1": {200, 429}, "k2": {200, 429}} {
		for i, w := range want {
			if code, _ := byHeader.send(c, map[string]string{"X-Api-Key": key}); code != w {
				t.Errorf("key %s request %d: %d, want %d", key, i+1, code, w)
			}
		}
	}
	whole := startLimited(t, &config.RateLimit{ID: "c", Requests: 1, Per: time.Hour, Burst: 2, Key: config.RateLimitWhole}, nil)
	got := []int{}
	for _, ip := range []string{"1.1.1.1", "2.2.2.2", "3.3.3.3"} {
		code, _ := whole.send(c, map[string]string{"X-Real-IP": ip})
		got = append(got, code)
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("whole target, three clients: %v, want [200 200 429]", got)
	}
}

// TestRateLimitKeptAcrossApply: a new Config with the same limit keeps
// its buckets (a reload does not refill them); changed settings start
// anew.
func TestRateLimitKeptAcrossApply(t *testing.T) {
	c := keptAliveClient()
	backend := slowBackend(t, "ok")
	rl := &config.RateLimit{ID: "p", Requests: 1, Per: time.Hour, Burst: 1}
	p := startBalanced(t, func(port int) *config.Config { return limitedConfig(t, port, rl, nil, backend) })
	if code, _ := p.send(c, nil); code != 200 {
		t.Fatalf("first: %d", code)
	}
	same := *rl
	if err := p.rt.Apply(limitedConfig(t, p.port, &same, nil, backend)); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.send(c, nil); code != 429 {
		t.Errorf("after a reload with the same limit: %d, want 429", code)
	}
	changed := *rl
	changed.Burst = 2
	if err := p.rt.Apply(limitedConfig(t, p.port, &changed, nil, backend)); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.send(c, nil); code != 200 {
		t.Errorf("after the limit changed: %d, want 200", code)
	}
}

// TestRateLimitAttackManyKeys: a million distinct keys (a client making up
// addresses or header values) keep at most MaxKeys buckets, and the heap
// stays within a bound far below what a bucket per key would take; the
// keys still in the table are the most recent.
func TestRateLimitAttackManyKeys(t *testing.T) {
	const maxKeys = 10_000
	l := newLimiter(&config.RateLimit{ID: "x", Requests: 10, Per: time.Second, Burst: 10, Key: config.RateLimitByHeader, Header: "X-Key", MaxKeys: maxKeys}, time.Now())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := time.Now()
	for i := range 1_000_000 {
		b := l.buckets.get(l.keyOf("key-"+strconv.Itoa(i)), now, l.burst)
		if ok, _, _, _ := b.take(l, now); !ok {
			t.Fatalf("key %d: a new key's bucket is empty", i)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := l.buckets.size(); n > maxKeys {
		t.Errorf("%d buckets kept, cap %d", n, maxKeys)
	}
	// A bucket is about 100 bytes with its map entry: 10,000 take ~1 MB,
	// a million would take over 100 MB.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
		t.Errorf("heap grew by %d MB for a million keys", grew>>20)
	}
	// The last key used is still there, with its token taken.
	b := l.buckets.get(l.keyOf("key-999999"), now, l.burst)
	if _, remaining, _, _ := b.take(l, now); remaining != 8 {
		t.Errorf("the most recent key's bucket has %d tokens left, want 8 (it was dropped)", remaining)
	}
}

// TestRateLimitHoldsRate: four clients asking far more than 200 requests a
// second for 10 s over real sockets get the burst (20) and 200 answers a
// second, within 5%: counted as 200s, the rest being 429s. (With a burst
// of 1 a token is lost whenever no request is waiting the moment it
// comes: a token bucket's rate holds for demand that keeps it empty.)
func TestRateLimitHoldsRate(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s")
	}
	const rate = 200
	const burst = 20
	p := startLimited(t, &config.RateLimit{ID: "rate", Requests: rate, Per: time.Second, Burst: burst}, nil)
	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(10 * time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1,
				DialContext: (&net.Dialer{}).DialContext}}
			defer c.CloseIdleConnections()
			for time.Now().Before(stop) {
				resp, err := c.Get(p.url)
				if err != nil {
					other.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					limited.Add(1)
				default:
					other.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	want := burst + rate*elapsed.Seconds()
	got := float64(ok.Load())
	t.Logf("%d answered, %d limited, %d other in %v: %.1f/s", ok.Load(), limited.Load(), other.Load(), elapsed, got/elapsed.Seconds())
	if limited.Load() == 0 || other.Load() > 0 {
		t.Fatalf("%d limited, %d other answers or errors: the clients did not exceed the rate, or failed", limited.Load(), other.Load())
	}
	if got < want*0.95 || got > want*1.05 {
		t.Errorf("%.0f answered in %v, want %.0f ± 5%%", got, elapsed, want)
	}
}

// BenchmarkRateLimitAllow is the cost a rate limit adds to a request it
// lets through: per client address over 1,000 clients, and for the whole
// target.
func BenchmarkRateLimitAllow(b *testing.B) {
	for _, key := range []config.RateLimitKey{config.RateLimitByClient, config.RateLimitWhole} {
		b.Run(string(key), func(b *testing.B) {
			var ls rateLimits
			rl := &config.RateLimit{ID: "bench", Requests: 1 << 40, Per: time.Second, Burst: 1 << 40, Key: key, MaxKeys: 10_000}
			reqs := make([]*http.Request, 1000)
			for i := range reqs {
				reqs[i], _ = http.NewRequest(http.MethodGet, "http://x/", nil)
				reqs[i].RemoteAddr = fmt.Sprintf("10.0.%d.%d:1234", i/256, i%256)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !ls.allow(nil, reqs[i%len(reqs)], rl) {
					b.Fatal("limited")
				}
			}
		})
	}
}
