package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// echoClientBackend answers the X-Forwarded-For Portico sent it: the
// client's address as the data plane found it.
func echoClientBackend(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// startClientPolicy serves one rule to a backend echoing the client's
// address, with client on the listener and pp on the port.
func startClientPolicy(t *testing.T, client *config.ClientTraffic, pp *config.ProxyProtocol) *balanced {
	t.Helper()
	backend := echoClientBackend(t)
	return startBalanced(t, func(port int) *config.Config {
		cfg := balancedConfig(t, port, nil, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": {backend}})
		for l := range cfg.Ports[0].All.Values() {
			l.Client = client
		}
		cfg.Ports[0].ProxyProtocol = pp
		return cfg
	})
}

// clientSeen sends a GET with X-Forwarded-For xff (none when "") and the
// other headers h, and returns the status and what the backend saw.
func (p *balanced) clientSeen(xff string, h map[string]string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url, nil)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		p.t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func prefixes(t *testing.T, cidrs ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}

// TestClientAddressAttackSpoofedXFF: a client that is not a trusted proxy
// sends X-Forwarded-For naming another address; the backend (and every
// other reader of the client's address) sees the client's own. From a
// trusted peer the same header is believed, and trusted entries are
// skipped from the right, but not past the first untrusted one.
func TestClientAddressAttackSpoofedXFF(t *testing.T) {
	untrusted := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{XFFTrustedCIDRs: prefixes(t, "10.0.0.0/8")}}, nil)
	for _, spoof := range []string{"6.6.6.6", "6.6.6.6, 10.1.1.1", "10.1.1.1"} {
		if code, got := untrusted.clientSeen(spoof, nil); code != 200 || got != "127.0.0.1" {
			t.Errorf("untrusted peer sending X-Forwarded-For %q: %d, backend saw %q, want 127.0.0.1", spoof, code, got)
		}
	}
	trusted := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{XFFTrustedCIDRs: prefixes(t, "127.0.0.0/8", "10.0.0.0/8")}}, nil)
	for xff, want := range map[string]string{
		"203.0.113.9":                     "203.0.113.9",
		"6.6.6.6, 203.0.113.9, 10.0.0.1":  "203.0.113.9", // 6.6.6.6 is what 203.0.113.9 claimed: not believed
		"10.0.0.2, 10.0.0.1":              "10.0.0.2",    // every entry trusted: the leftmost
		"garbage, 203.0.113.9":            "203.0.113.9",
		"203.0.113.9, garbage":            "127.0.0.1", // unreadable entry: stop at the last trusted one
		"[2001:db8::1]:443, 10.0.0.1":     "2001:db8::1",
		"::ffff:198.51.100.1, 127.0.0.3 ": "198.51.100.1",
	} {
		if code, got := trusted.clientSeen(xff, nil); code != 200 || got != want {
			t.Errorf("trusted peer sending X-Forwarded-For %q: %d, backend saw %q, want %q", xff, code, got, want)
		}
	}
}

// TestClientAddressTrustedHops: with one trusted hop the client is the
// last entry (what the proxy in front appended), whatever the client put
// before it; with fewer entries than hops, the peer.
func TestClientAddressTrustedHops(t *testing.T) {
	p := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{XFFTrustedHops: 1}}, nil)
	for xff, want := range map[string]string{"6.6.6.6, 203.0.113.7": "203.0.113.7", "203.0.113.7": "203.0.113.7", "": "127.0.0.1"} {
		if code, got := p.clientSeen(xff, nil); code != 200 || got != want {
			t.Errorf("X-Forwarded-For %q: %d, backend saw %q, want %q", xff, code, got, want)
		}
	}
	two := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{XFFTrustedHops: 2}}, nil)
	for xff, want := range map[string]string{"6.6.6.6, 198.51.100.4, 203.0.113.7": "198.51.100.4", "203.0.113.7": "127.0.0.1"} {
		if code, got := two.clientSeen(xff, nil); code != 200 || got != want {
			t.Errorf("two hops, X-Forwarded-For %q: %d, backend saw %q, want %q", xff, code, got, want)
		}
	}
}

// TestClientAddressCustomHeader: the header's address is the client's;
// without a valid one the request is refused when failing closed, else it
// is from its peer.
func TestClientAddressCustomHeader(t *testing.T) {
	closed := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{Header: "X-Real-Ip", FailClosed: true}}, nil)
	if code, got := closed.clientSeen("6.6.6.6", map[string]string{"X-Real-IP": "203.0.113.5"}); code != 200 || got != "203.0.113.5" {
		t.Errorf("with X-Real-IP: %d %q, want 200 203.0.113.5", code, got)
	}
	for _, h := range []map[string]string{nil, {"X-Real-IP": "not an address"}, {"X-Real-IP": "fe80::1%eth0"}} {
		if code, _ := closed.clientSeen("", h); code != http.StatusForbidden {
			t.Errorf("failing closed with %v: %d, want 403", h, code)
		}
	}
	open := startClientPolicy(t, &config.ClientTraffic{Address: &config.ClientAddress{Header: "X-Real-Ip"}}, nil)
	if code, got := open.clientSeen("6.6.6.6", nil); code != 200 || got != "127.0.0.1" {
		t.Errorf("failing open without X-Real-IP: %d %q, want 200 127.0.0.1", code, got)
	}
}

// TestClientAddressHashes: consistent hashing on the source address hashes
// the detected address: the same X-Real-IP from new connections keeps its
// endpoint, and the keys spread over endpoints.
func TestClientAddressHashes(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 5)
	lb := &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashSourceIP}
	p := startBalanced(t, func(port int) *config.Config {
		cfg := balancedConfig(t, port, lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": addrs})
		for l := range cfg.Ports[0].All.Values() {
			l.Client = &config.ClientTraffic{Address: &config.ClientAddress{Header: "X-Real-Ip"}}
		}
		return cfg
	})
	used := map[string]bool{}
	for i := range 20 {
		h := http.Header{"X-Real-Ip": {fmt.Sprintf("198.51.100.%d", i)}}
		first := p.get(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, h)
		for range 5 {
			if got := p.get(&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}, h); got != first {
				t.Fatalf("client %s went to %s, then %s", h.Get("X-Real-Ip"), first, got)
			}
		}
		used[first] = true
	}
	if len(used) < 2 {
		t.Errorf("20 detected client addresses from one peer all went to %v: the peer was hashed", used)
	}
}

// TestListenerHeaderLimits: a listener's own header limits, stricter than
// the port's, answer 431 to a request over them, on real sockets; a
// request within them is served.
func TestListenerHeaderLimits(t *testing.T) {
	p := startClientPolicy(t, &config.ClientTraffic{MaxHeaderBytes: 400, MaxHeaderCount: 8}, nil)
	if code, _ := p.clientSeen("", map[string]string{"X-A": "1", "X-B": "2"}); code != 200 {
		t.Errorf("within the limits: %d", code)
	}
	many := map[string]string{}
	for i := range 10 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	if code, _ := p.clientSeen("", many); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("10 more fields with a count of 8: %d, want 431", code)
	}
	if code, _ := p.clientSeen("", map[string]string{"X-Big": strings.Repeat("a", 500)}); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("500 bytes with a limit of 400: %d, want 431", code)
	}
}
