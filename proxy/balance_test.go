package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// balanced is a proxy serving one rule whose backends (Services, each on
// port 80) are balanced as a BackendTrafficPolicy says, with endpoints
// that answer their own names.
type balanced struct {
	t    *testing.T
	rt   *Runtime
	port int
	url  string
}

// balancedConfig compiles one rule over services (name -> weight) with
// rule-level load balancing lb (nil: none) and Service-level svcLB (by
// Service; nil: none), with endpoints eps.
func balancedConfig(t testing.TB, port int, lb *config.LoadBalancer, services map[string]int32, svcLB map[string]*config.LoadBalancer, eps map[string][]string) *config.Config {
	t.Helper()
	return persistentConfig(t, port, lb, nil, services, svcLB, eps)
}

// persistentConfig is balancedConfig with the rule's sessionPersistence
// sp (nil: none).
func persistentConfig(t testing.TB, port int, lb *config.LoadBalancer, sp *gwv1.SessionPersistence, services map[string]int32, svcLB map[string]*config.LoadBalancer, eps map[string][]string) *config.Config {
	t.Helper()
	p := gwv1.PortNumber(80)
	var refs []gwv1.HTTPBackendRef
	svcs := map[types.NamespacedName]routing.Service{}
	names := make([]string, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	// Map order must not decide the rule's backend order.
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			if names[j] < names[i] {
				names[i], names[j] = names[j], names[i]
			}
		}
	}
	for _, name := range names {
		w := services[name]
		refs = append(refs, gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: &p}, Weight: &w}})
		svcs[types.NamespacedName{Namespace: "ns", Name: name}] = routing.Service{Ports: []routing.ServicePort{{Name: "http", Port: 80}}, LB: svcLB[name]}
	}
	in := oneListener([]*gwv1.HTTPRoute{ruleRoute("", gwv1.HTTPRouteRule{BackendRefs: refs, SessionPersistence: sp})}, svcs)
	if lb != nil {
		in.Traffic = func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic {
			return config.RuleTraffic{LB: &config.LoadBalancer{Algorithm: lb.Algorithm, HashOn: lb.HashOn, HashName: lb.HashName, Policy: lb.Policy}}
		}
	}
	return onePortConfig(port, compileOne(t, in).Tables[0], nil, eps)
}

// namedBackends starts n endpoints answering their names, prefix + index.
func namedBackends(t *testing.T, prefix string, n int) (addrs []string, byAddr map[string]string) {
	byAddr = map[string]string{}
	for i := range n {
		name := prefix + strconv.Itoa(i)
		a := slowBackend(t, name)
		addrs = append(addrs, a)
		byAddr[a] = name
	}
	return addrs, byAddr
}

func startBalanced(t *testing.T, cfg func(port int) *config.Config) *balanced {
	t.Helper()
	rt := newRuntime(t)
	port := freePort(t)
	if err := rt.Apply(cfg(port)); err != nil {
		t.Fatal(err)
	}
	return &balanced{t: t, rt: rt, port: port, url: fmt.Sprintf("http://127.0.0.1:%d/", port)}
}

// get sends one GET through client c with header h and returns who
// answered.
func (p *balanced) get(c *http.Client, h http.Header) string {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		p.t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("GET: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

func keptAliveClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

const (
	spreadRequests = 10000
	spreadEps      = 10
)

// TestBalanceDistribution sends 10,000 requests through each algorithm to
// 10 endpoints and checks each endpoint's share: round robin gives every
// endpoint exactly 1,000 (one client, one request at a time); Random and
// LeastRequest (which, with nothing in flight, is random) stay within 5
// standard deviations of 1,000 (±150); a consistent hash over 10,000
// different keys within ±200 (the binomial spread and the table's
// unevenness of about 1% per endpoint).
func TestBalanceDistribution(t *testing.T) {
	addrs, names := namedBackends(t, "e", spreadEps)
	_ = names
	cases := []struct {
		lb     *config.LoadBalancer
		header func(i int) http.Header
		within int
	}{
		{&config.LoadBalancer{Algorithm: config.LBRoundRobin}, nil, 0},
		{&config.LoadBalancer{Algorithm: config.LBRandom}, nil, 150},
		{&config.LoadBalancer{Algorithm: config.LBLeastRequest}, nil, 150},
		{&config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"},
			func(i int) http.Header { return http.Header{"X-User": {"user-" + strconv.Itoa(i)}} }, 200},
		{&config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashCookie, HashName: "session"},
			func(i int) http.Header { return http.Header{"Cookie": {"a=b; session=s" + strconv.Itoa(i*7919)}} }, 200},
	}
	for _, tc := range cases {
		name := string(tc.lb.Algorithm) + string(tc.lb.HashOn)
		t.Run(name, func(t *testing.T) {
			p := startBalanced(t, func(port int) *config.Config {
				return balancedConfig(t, port, tc.lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": addrs})
			})
			c := keptAliveClient()
			counts := map[string]int{}
			for i := range spreadRequests {
				var h http.Header
				if tc.header != nil {
					h = tc.header(i)
				}
				counts[p.get(c, h)]++
			}
			t.Logf("%s over %d requests: %v", name, spreadRequests, counts)
			if len(counts) != spreadEps {
				t.Fatalf("%d endpoints answered, want %d: %v", len(counts), spreadEps, counts)
			}
			want := spreadRequests / spreadEps
			for e, n := range counts {
				if n < want-tc.within || n > want+tc.within {
					t.Errorf("%s: %d requests, want %d ± %d", e, n, want, tc.within)
				}
			}
		})
	}
}

// TestBalanceWeightedRoundRobin: with RoundRobin, a rule's backends of
// weights 3 and 1 get their shares in an interleaved order, not at random:
// of 10,000 requests 7,500 ± 10 and 2,500 ± 10, and no window of 40
// requests has fewer than 27 of the first.
func TestBalanceWeightedRoundRobin(t *testing.T) {
	a := slowBackend(t, "a")
	b := slowBackend(t, "b")
	p := startBalanced(t, func(port int) *config.Config {
		return balancedConfig(t, port, &config.LoadBalancer{Algorithm: config.LBRoundRobin},
			map[string]int32{"heavy": 3, "light": 1}, nil, map[string][]string{"heavy": {a}, "light": {b}})
	})
	c := keptAliveClient()
	var seq []string
	counts := map[string]int{}
	for range spreadRequests {
		who := p.get(c, nil)
		seq = append(seq, who)
		counts[who]++
	}
	t.Logf("weights 3:1 over %d requests: %v", spreadRequests, counts)
	if d := counts["a"] - 7500; d < -10 || d > 10 {
		t.Errorf("heavy got %d, want 7500 ± 10", counts["a"])
	}
	for i := 0; i+40 <= len(seq); i += 40 {
		n := 0
		for _, w := range seq[i : i+40] {
			if w == "a" {
				n++
			}
		}
		if n < 27 || n > 33 {
			t.Fatalf("requests %d-%d: %d to heavy, want 30 ± 3", i, i+40, n)
		}
	}
}

// TestBalanceLeastRequestAvoidsBusy: under 16 concurrent clients, an
// endpoint that takes 100 ms per answer among nine that answer at once
// gets a tenth of the requests round robin, and under half of that with
// LeastRequest, which sees its requests in flight.
func TestBalanceLeastRequestAvoidsBusy(t *testing.T) {
	addrs, _ := namedBackends(t, "fast", 9)
	slow := serveBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		io.WriteString(w, "slow")
	}))
	addrs = append(addrs, slow)
	share := func(alg config.LBAlgorithm) float64 {
		p := startBalanced(t, func(port int) *config.Config {
			return balancedConfig(t, port, &config.LoadBalancer{Algorithm: alg}, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": addrs})
		})
		c := keptAliveClient()
		var mu sync.Mutex
		var wg sync.WaitGroup
		total, slowN := 0, 0
		for range 16 {
			wg.Go(func() {
				for range 100 {
					who := p.get(c, nil)
					mu.Lock()
					total++
					if who == "slow" {
						slowN++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return float64(slowN) / float64(total)
	}
	rr, lr := share(config.LBRoundRobin), share(config.LBLeastRequest)
	t.Logf("share of the slow endpoint: RoundRobin %.3f, LeastRequest %.3f", rr, lr)
	if rr < 0.09 {
		t.Errorf("RoundRobin gave the slow endpoint %.3f, want its tenth", rr)
	}
	if lr > 0.05 {
		t.Errorf("LeastRequest gave the slow endpoint %.3f, want under 0.05", lr)
	}
}

// TestBalanceHashAffinity: one key goes to one endpoint for 1,000
// requests; 100 keys keep their endpoints across a reload of the data
// plane that lists the same endpoints in another order (a new Endpoints,
// a new table); when one of the 10 endpoints goes away, the keys it had
// move and few others (Maglev trades a little disruption for an even
// share: under 1% of the keys), about a tenth of 1,000 keys in all.
func TestBalanceHashAffinity(t *testing.T) {
	addrs, _ := namedBackends(t, "e", spreadEps)
	lb := &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"}
	cfg := func(eps []string) func(int) *config.Config {
		return func(port int) *config.Config {
			return balancedConfig(t, port, lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": eps})
		}
	}
	p := startBalanced(t, cfg(addrs))
	c := keptAliveClient()
	key := func(i int) http.Header { return http.Header{"X-User": {"user-" + strconv.Itoa(i)}} }

	first := p.get(c, key(42))
	for i := range 1000 {
		if got := p.get(c, key(42)); got != first {
			t.Fatalf("request %d of one key went to %s, the first to %s", i, got, first)
		}
	}

	const keys = 1000
	before := make([]string, keys)
	for i := range keys {
		before[i] = p.get(c, key(i))
	}
	shuffled := append([]string(nil), addrs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if err := p.rt.Apply(cfg(shuffled)(p.port)); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if got := p.get(c, key(i)); got != before[i] {
			t.Fatalf("after a reload, key %d went to %s, before to %s", i, got, before[i])
		}
	}

	gone := addrs[3]
	rest := append(append([]string(nil), addrs[:3]...), addrs[4:]...)
	if err := p.rt.Apply(cfg(rest)(p.port)); err != nil {
		t.Fatal(err)
	}
	moved, hadGone, others := 0, 0, 0
	for i := range keys {
		got := p.get(c, key(i))
		if before[i] == "e3" {
			hadGone++
			if got == "e3" {
				t.Fatalf("key %d still goes to the removed endpoint %s", i, gone)
			}
		}
		if got != before[i] {
			moved++
			if before[i] != "e3" {
				others++
			}
		}
	}
	t.Logf("one of %d endpoints removed: %d of %d keys moved (%.3f); %d had it, %d of others moved", spreadEps, moved, keys, float64(moved)/keys, hadGone, others)
	if moved < 60 || moved > 140 || others > keys/100 {
		t.Errorf("%d keys moved (%d of endpoints that stayed), want about 100 (under 10)", moved, others)
	}
}

// TestBalanceHashSourceIP: with the client's address as key, each of 20
// loopback client addresses keeps one endpoint over 20 connections, and
// the addresses spread over more than one endpoint.
func TestBalanceHashSourceIP(t *testing.T) {
	addrs, _ := namedBackends(t, "e", spreadEps)
	lb := &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashSourceIP}
	p := startBalanced(t, func(port int) *config.Config {
		return balancedConfig(t, port, lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": addrs})
	})
	used := map[string]bool{}
	for ip := 2; ip < 22; ip++ {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(ip))}
		var first string
		for range 20 {
			// A new connection each time: the key is the address, not the
			// connection.
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
				DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: local}).DialContext}}
			got := p.get(c, nil)
			if first == "" {
				first = got
			} else if got != first {
				t.Fatalf("client 127.0.0.%d went to %s, then to %s", ip, first, got)
			}
		}
		used[first] = true
	}
	if len(used) < 2 {
		t.Errorf("20 client addresses all went to %v", used)
	}
}

// TestBalanceServicePolicyPicksEndpoints: a Service's own policy picks
// among its endpoints whatever the rule's says: a header hash on the
// Service keeps a key on one endpoint although the rule is Random.
func TestBalanceServicePolicyPicksEndpoints(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 5)
	svcLB := &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"}
	p := startBalanced(t, func(port int) *config.Config {
		return balancedConfig(t, port, &config.LoadBalancer{Algorithm: config.LBRandom}, map[string]int32{"svc": 1},
			map[string]*config.LoadBalancer{"svc": svcLB}, map[string][]string{"svc": addrs})
	})
	c := keptAliveClient()
	h := http.Header{"X-User": {"alice"}}
	first := p.get(c, h)
	for i := range 200 {
		if got := p.get(c, h); got != first {
			t.Fatalf("request %d went to %s, the first to %s", i, got, first)
		}
	}
}

// TestBalanceHashSkipsDownEndpoint: a key whose endpoint refuses
// connections is answered by another endpoint, and keeps that one while
// its own is left out.
func TestBalanceHashSkipsDownEndpoint(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 4)
	dead := deadAddr(t)
	all := append(addrs, dead)
	lb := &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"}
	p := startBalanced(t, func(port int) *config.Config {
		return balancedConfig(t, port, lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": all})
	})
	c := keptAliveClient()
	// Find keys the table gives the dead endpoint.
	eps := config.NewEndpoints(all...)
	var keys []string
	for i := 0; len(keys) < 5; i++ {
		k := "k" + strconv.Itoa(i)
		if eps.PickHash(config.HashKey(k), 0) == len(all)-1 {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		h := http.Header{"X-User": {k}}
		first := p.get(c, h)
		for range 10 {
			if got := p.get(c, h); got != first {
				t.Fatalf("key %s went to %s, then %s", k, first, got)
			}
		}
	}
}

// TestCookieValue: the cookie of the policy's name, not one whose name
// it ends or starts with, with quotes taken off, from any Cookie line.
func TestCookieValue(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
		ok    bool
	}{
		{[]string{"session=abc"}, "abc", true},
		{[]string{"a=1; session=abc; b=2"}, "abc", true},
		{[]string{"xsession=1; sessionx=2;session=\"q\""}, "q", true},
		{[]string{"a=1", "session=second"}, "second", true},
		{[]string{"a=1; sess=2"}, "", false},
		{nil, "", false},
		{[]string{"session="}, "", true},
	} {
		got, ok := cookieValue(tc.lines, "session")
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.lines, got, ok, tc.want, tc.ok)
		}
	}
}

// TestClientIP: the address without its port, IPv6 without brackets.
func TestClientIP(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:5000": "127.0.0.1", "[::1]:80": "::1", "[fe80::1%eth0]:1": "fe80::1%eth0", "10.0.0.1": "10.0.0.1"} {
		if got := clientIP(in); got != want {
			t.Errorf("clientIP(%q) = %q, want %q", in, got, want)
		}
	}
}
