package proxy

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// recordingBackend answers 200 "ok" and keeps what each request carried
// on the wire: its request line and headers.
type recordingBackend struct {
	addr string
	mu   sync.Mutex
	seen []string
}

func newRecordingBackend(t *testing.T) *recordingBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &recordingBackend{addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s\n", r.Method, r.RequestURI)
		_ = r.Header.Write(&sb)
		b.mu.Lock()
		b.seen = append(b.seen, sb.String())
		b.mu.Unlock()
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *recordingBackend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

func (b *recordingBackend) last(t *testing.T) string {
	t.Helper()
	seen := b.requests()
	if len(seen) == 0 {
		t.Fatal("the backend got no request")
	}
	return seen[len(seen)-1]
}

// securedConfig is one rule to backend guarded by sec.
func securedConfig(t testing.TB, port int, sec *config.Security, backend string) *config.Config {
	t.Helper()
	in := oneListener([]*gwv1.HTTPRoute{ruleRoute("web", gwv1.HTTPRouteRule{})}, httpService("web", routing.Service{}))
	if sec != nil {
		in.Security = func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) *config.Security { return sec }
	}
	return onePortConfig(port, compileOne(t, in).Tables[0], nil, map[string][]string{"web": {backend}})
}

// securityObserver counts requests and security decisions.
type securityObserver struct {
	mu        sync.Mutex
	decisions map[string]int // "mechanism:result"
}

func (o *securityObserver) ObserveRequest(string, int, string, time.Duration) {}
func (o *securityObserver) ObserveGRPC(string, int)                           {}
func (o *securityObserver) ObserveSecurity(mechanism, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decisions[mechanism+":"+result]++
}

func (o *securityObserver) count(d string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.decisions[d]
}

// guarded is a proxy serving one rule guarded by a Security, with its
// metrics and access log kept for the test.
type guarded struct {
	rt      *Runtime
	url     string
	obs     *securityObserver
	access  *observer.ObservedLogs
	backend *recordingBackend
}

func startGuarded(t *testing.T, sec *config.Security) *guarded {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	g := &guarded{obs: &securityObserver{decisions: map[string]int{}}, access: logs, backend: newRecordingBackend(t)}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	opts.Observer = g.obs
	opts.AccessLog = zap.New(core)
	g.rt = New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.rt.Close(ctx)
	})
	port := freePort(t)
	if err := g.rt.Apply(securedConfig(t, port, sec, g.backend.addr)); err != nil {
		t.Fatal(err)
	}
	g.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	return g
}

// do sends one request of path with headers h (values in order), from
// local address from ("" for any), and returns the status, the
// WWW-Authenticate and the body.
func (g *guarded) do(t *testing.T, from, path string, h [][2]string) (int, string, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	if from != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		tr.DialContext = d.DialContext
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, g.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range h {
		req.Header.Add(kv[0], kv[1])
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Www-Authenticate"), string(b)
}

func basicHeader(user, password string) [2]string {
	return [2]string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}
}

func shaHash(password string) string {
	sum := sha1.Sum([]byte(password))
	return "{SHA}" + base64.StdEncoding.EncodeToString(sum[:])
}

func bcryptHash(t testing.TB, password string, cost int) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// TestSecurityBasicAuth: without credentials, with a wrong password or an
// unknown user, a 401 with the realm's challenge and nothing sent on;
// with a right bcrypt or {SHA} password the request reaches the backend
// without its Authorization header and with the user's name in the
// configured header (the one the client sent replaced); two
// Authorization headers are a 400. Each decision is in the access log
// and counted.
func TestSecurityBasicAuth(t *testing.T) {
	b := config.NewBasicAuth("staff", "ns/users", map[string]string{"alice": bcryptHash(t, "alice-pw", 4), "bob": shaHash("bob-pw")})
	b.UsernameHeader = "X-User"
	g := startGuarded(t, &config.Security{Policy: "ns/p", Basic: b})

	for _, tc := range []struct {
		name string
		h    [][2]string
		code int
	}{
		{"no credentials", nil, 401},
		{"another scheme", [][2]string{{"Authorization", "Bearer abc"}}, 401},
		{"wrong password", [][2]string{basicHeader("alice", "nope")}, 401},
		{"unknown user", [][2]string{basicHeader("mallory", "alice-pw")}, 401},
		{"SHA user, wrong password", [][2]string{basicHeader("bob", "alice-pw")}, 401},
		{"two headers", [][2]string{basicHeader("alice", "alice-pw"), basicHeader("bob", "x")}, 400},
	} {
		code, challenge, _ := g.do(t, "", "/", tc.h)
		if code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
		if code == 401 && challenge != `Basic realm="staff", charset="UTF-8"` {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, challenge)
		}
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d refused requests", n)
	}
	for _, user := range []string{"alice", "bob"} {
		code, _, body := g.do(t, "", "/", [][2]string{basicHeader(user, user+"-pw"), {"X-User", "root"}})
		if code != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", user, code, body)
		}
		seen := g.backend.last(t)
		if strings.Contains(seen, "Authorization") {
			t.Errorf("%s: the backend got the Authorization header:\n%s", user, seen)
		}
		if !strings.Contains(seen, "X-User: "+user+"\r\n") || strings.Contains(seen, "root") {
			t.Errorf("%s: the backend did not get X-User %s alone:\n%s", user, user, seen)
		}
	}
	if got := g.obs.count("basic:allowed"); got != 2 {
		t.Errorf("basic:allowed counted %d times, want 2", got)
	}
	if got := g.obs.count("basic:denied"); got != 3 {
		t.Errorf("basic:denied counted %d times, want 3", got)
	}
	auths := map[string]int{}
	for _, e := range g.access.All() {
		auths[e.ContextMap()["auth"].(string)]++
	}
	if auths["basic:allowed"] != 2 || auths["basic:missing"] != 2 || auths["basic:malformed"] != 1 {
		t.Errorf("access log auth fields %v", auths)
	}
}

// TestSecurityBasicAuthForwardsWhenAsked: forwardAuthorization keeps the
// header for the backend.
func TestSecurityBasicAuthForwardsWhenAsked(t *testing.T) {
	b := config.NewBasicAuth("r", "ns/users", map[string]string{"bob": shaHash("bob-pw")})
	b.ForwardAuthorization = true
	g := startGuarded(t, &config.Security{Basic: b})
	if code, _, _ := g.do(t, "", "/", [][2]string{basicHeader("bob", "bob-pw")}); code != 200 {
		t.Fatalf("%d", code)
	}
	if seen := g.backend.last(t); !strings.Contains(seen, "Authorization: Basic ") {
		t.Errorf("the backend did not get the Authorization header:\n%s", seen)
	}
}

// TestAttackBasicAuthFloodOfOneValidCredential: 300 requests of one valid
// bcrypt credential, from 8 clients at once, cost one bcrypt: the first
// request's; the others are taken from the verification cache.
func TestAttackBasicAuthFloodOfOneValidCredential(t *testing.T) {
	b := config.NewBasicAuth("r", "ns/users", map[string]string{"alice": bcryptHash(t, "alice-pw", bcrypt.DefaultCost)})
	g := startGuarded(t, &config.Security{Basic: b})
	cred := [][2]string{basicHeader("alice", "alice-pw")}
	if code, _, _ := g.do(t, "", "/", cred); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 300)
	for range 8 {
		wg.Go(func() {
			c := keptAliveClient()
			for range 300 / 8 {
				req, _ := http.NewRequest(http.MethodGet, g.url+"/", nil)
				req.Header.Set(cred[0][0], cred[0][1])
				resp, err := c.Do(req)
				if err != nil {
					codes <- 0
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}
		})
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Fatalf("a request of the flood got %d", code)
		}
	}
	if n := g.rt.fwd.guard.hashed.Load(); n != 1 {
		t.Errorf("%d bcrypt verifications for one credential, want 1", n)
	}
}

// TestAttackBasicAuthFloodOfWrongPasswords: one client trying 60 wrong
// passwords has failureBurst of them verified; the rest get 429 at no
// bcrypt's cost. A client of another address is not limited by it, and
// the right password of a credential verified before stays accepted
// from the limited client (the cache costs nothing).
func TestAttackBasicAuthFloodOfWrongPasswords(t *testing.T) {
	b := config.NewBasicAuth("r", "ns/users", map[string]string{"alice": bcryptHash(t, "alice-pw", 4)})
	g := startGuarded(t, &config.Security{Basic: b})
	if code, _, _ := g.do(t, "127.0.0.1", "/", [][2]string{basicHeader("alice", "alice-pw")}); code != 200 {
		t.Fatalf("right password: %d", code)
	}
	limited := 0
	for i := range 60 {
		code, _, _ := g.do(t, "127.0.0.1", "/", [][2]string{basicHeader("alice", fmt.Sprintf("guess-%d", i))})
		switch code {
		case 401:
		case 429:
			limited++
		default:
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	// The burst, and at most one refill in the time the loop took.
	if n := g.rt.fwd.guard.hashed.Load(); n > 1+failureBurst+2 {
		t.Errorf("%d bcrypt verifications for 60 wrong passwords of one client, want at most %d", n, 1+failureBurst+2)
	}
	if limited < 60-failureBurst-2 {
		t.Errorf("%d guesses limited, want at least %d", limited, 60-failureBurst-2)
	}
	if code, _, _ := g.do(t, "127.0.0.1", "/", [][2]string{basicHeader("alice", "alice-pw")}); code != 200 {
		t.Errorf("the verified credential from the limited client: %d", code)
	}
	if code, _, _ := g.do(t, "127.0.0.2", "/", [][2]string{basicHeader("alice", "wrong")}); code != 401 {
		t.Errorf("another client's wrong password: %d, want 401 (verified, not limited)", code)
	}
	if got := g.obs.count("basic:limited"); got != limited {
		t.Errorf("basic:limited counted %d, want %d", got, limited)
	}
}

// TestAttackBasicAuthManyClientsBoundedCPU: 64 clients of distinct
// addresses at once, each with a wrong password for a bcrypt hash of the
// default cost: no more bcrypt verifications run at once than the slots
// (half the cores), whatever the number of clients.
func TestAttackBasicAuthManyClientsBoundedCPU(t *testing.T) {
	b := config.NewBasicAuth("r", "ns/users", map[string]string{"alice": bcryptHash(t, "alice-pw", bcrypt.DefaultCost)})
	g := startGuarded(t, &config.Security{Basic: b})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			code, _, _ := g.do(t, fmt.Sprintf("127.0.%d.%d", 1+i/200, 2+i%200), "/", [][2]string{basicHeader("alice", "wrong")})
			if code != 401 && code != 503 {
				t.Errorf("client %d: %d", i, code)
			}
		})
	}
	wg.Wait()
	guard := g.rt.fwd.guard
	if peak := int(guard.peak.Load()); peak > cap(guard.slots) {
		t.Errorf("%d bcrypt verifications ran at once, with %d slots", peak, cap(guard.slots))
	}
	if guard.hashed.Load() == 0 {
		t.Error("no verification ran")
	}
}

// TestSecurityAPIKeyHeader: the key in a header; without it or with a
// wrong one a 401, nothing sent on; with a right one the backend gets the
// client's name in the configured header (the one the client sent
// replaced) and never the key.
func TestSecurityAPIKeyHeader(t *testing.T) {
	k := config.NewAPIKeyAuth("X-Api-Key", "", []string{"ns/keys"}, map[string]string{"key-of-ci-0123456789": "ci", "key-of-ops-987654321": "ops"})
	k.ClientIDHeader = "X-Client"
	g := startGuarded(t, &config.Security{APIKey: k})
	for _, tc := range []struct {
		h    [][2]string
		code int
	}{
		{nil, 401},
		{[][2]string{{"X-Api-Key", "key-of-nobody"}}, 401},
		{[][2]string{{"X-Api-Key", ""}}, 401},
		{[][2]string{{"X-Api-Key", "key-of-ci-0123456789"}, {"X-Api-Key", "key-of-ops-987654321"}}, 400},
	} {
		if code, _, _ := g.do(t, "", "/", tc.h); code != tc.code {
			t.Errorf("%v: %d, want %d", tc.h, code, tc.code)
		}
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d refused requests", n)
	}
	code, _, _ := g.do(t, "", "/", [][2]string{{"x-api-key", "key-of-ci-0123456789"}, {"X-Client", "admin"}})
	if code != 200 {
		t.Fatalf("right key: %d", code)
	}
	seen := g.backend.last(t)
	if strings.Contains(seen, "key-of-ci") || strings.Contains(strings.ToLower(seen), "x-api-key") {
		t.Errorf("the key reached the backend:\n%s", seen)
	}
	if !strings.Contains(seen, "X-Client: ci\r\n") || strings.Contains(seen, "admin") {
		t.Errorf("the backend did not get X-Client ci alone:\n%s", seen)
	}
}

// TestAttackAPIKeyInQueryNeverReachesBackend: the key in a query
// parameter, sent as is, percent-encoded in its name or its value, among
// other parameters: each request passes and the backend gets the other
// parameters as they were sent and the key in none of its forms; the
// parameter twice is a 400.
func TestAttackAPIKeyInQueryNeverReachesBackend(t *testing.T) {
	const key = "k3y/of+ci=="
	k := config.NewAPIKeyAuth("", "api_key", []string{"ns/keys"}, map[string]string{key: "ci"})
	g := startGuarded(t, &config.Security{APIKey: k})
	enc := "k3y%2Fof%2Bci%3D%3D"
	for _, q := range []string{
		"api_key=" + enc,
		"a=1&api_key=" + enc + "&b=x%20y",
		"api%5Fkey=" + enc + "&a=1",
		"a=1&api%5fkey=" + enc,
	} {
		code, _, _ := g.do(t, "", "/p?"+q, nil)
		if code != 200 {
			t.Fatalf("?%s: %d", q, code)
		}
		seen := g.backend.last(t)
		line, _, _ := strings.Cut(seen, "\n")
		if strings.Contains(seen, "k3y") || strings.Contains(strings.ToLower(seen), "api") {
			t.Errorf("?%s: the key reached the backend:\n%s", q, seen)
		}
		if strings.Contains(q, "a=1") && !strings.Contains(line, "a=1") || strings.Contains(q, "b=x%20y") && !strings.Contains(line, "b=x%20y") {
			t.Errorf("?%s: the other parameters did not reach the backend as sent: %s", q, line)
		}
	}
	before := len(g.backend.requests())
	for _, q := range []string{"api_key=" + enc + "&api_key=" + enc, "api_key=other", "api_key=", "x=" + enc} {
		code, _, _ := g.do(t, "", "/p?"+q, nil)
		if code != 400 && code != 401 {
			t.Errorf("?%s: %d, want a refusal", q, code)
		}
	}
	if n := len(g.backend.requests()); n != before {
		t.Errorf("the backend got %d refused requests", n-before)
	}
}

// TestSecurityAddressList: allow and deny by the peer's address (clients
// bound to distinct loopback addresses); deny wins over allow; an
// X-Forwarded-For the client sends changes nothing.
func TestSecurityAddressList(t *testing.T) {
	list := &config.AddressList{Allow: mustPrefixes(t, "127.0.0.0/8"), Deny: mustPrefixes(t, "127.0.0.2/32")}
	g := startGuarded(t, &config.Security{Addresses: list})
	for _, tc := range []struct {
		from string
		h    [][2]string
		code int
	}{
		{"127.0.0.1", nil, 200},
		{"127.0.0.2", nil, 403},
		{"127.0.0.2", [][2]string{{"X-Forwarded-For", "127.0.0.1"}}, 403},
		{"127.0.0.3", nil, 200},
	} {
		if code, _, _ := g.do(t, tc.from, "/", tc.h); code != tc.code {
			t.Errorf("from %s %v: %d, want %d", tc.from, tc.h, code, tc.code)
		}
	}
	only := startGuarded(t, &config.Security{Addresses: &config.AddressList{Allow: mustPrefixes(t, "10.0.0.0/8")}})
	if code, _, _ := only.do(t, "127.0.0.1", "/", [][2]string{{"X-Forwarded-For", "10.1.2.3"}}); code != 403 {
		t.Errorf("a client outside allow, claiming to be inside: %d, want 403", code)
	}
	if got := g.obs.count("address:denied"); got != 2 {
		t.Errorf("address:denied counted %d, want 2", got)
	}
}

// TestSecurityInvalidPolicyAnswers500: a policy that cannot be enforced
// answers 500 and sends nothing on.
func TestSecurityInvalidPolicyAnswers500(t *testing.T) {
	g := startGuarded(t, &config.Security{Policy: "ns/p", Invalid: "Secret ns/users does not exist"})
	if code, _, _ := g.do(t, "", "/", [][2]string{basicHeader("a", "b")}); code != 500 {
		t.Errorf("%d, want 500", code)
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Errorf("the backend got %d requests", n)
	}
}

// TestSecurityMechanismsTogether: every mechanism set must pass.
func TestSecurityMechanismsTogether(t *testing.T) {
	sec := &config.Security{
		Addresses: &config.AddressList{Allow: mustPrefixes(t, "127.0.0.1")},
		APIKey:    config.NewAPIKeyAuth("X-Api-Key", "", nil, map[string]string{"the-key": "ci"}),
		Basic:     config.NewBasicAuth("r", "ns/users", map[string]string{"bob": shaHash("bob-pw")}),
	}
	g := startGuarded(t, sec)
	both := [][2]string{{"X-Api-Key", "the-key"}, basicHeader("bob", "bob-pw")}
	for _, tc := range []struct {
		from string
		h    [][2]string
		code int
	}{
		{"127.0.0.1", both, 200},
		{"127.0.0.2", both, 403},
		{"127.0.0.1", both[:1], 401},
		{"127.0.0.1", both[1:], 401},
	} {
		if code, _, _ := g.do(t, tc.from, "/", tc.h); code != tc.code {
			t.Errorf("from %s %v: %d, want %d", tc.from, tc.h, code, tc.code)
		}
	}
}

func mustPrefixes(t *testing.T, list ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if !strings.Contains(s, "/") {
			s += "/32"
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestSecurityOverHTTP2: the same checks guard HTTP/2 (h2c) requests: a
// missing credential is a 401 with the challenge, a gRPC call gets
// UNAUTHENTICATED in the gRPC form (HTTP 200, grpc-status 16) and a
// refused address PERMISSION_DENIED, none reaching the backend; the right
// credential passes without its Authorization header.
func TestSecurityOverHTTP2(t *testing.T) {
	b := config.NewBasicAuth("r", "ns/users", map[string]string{"bob": shaHash("bob-pw")})
	g := startGuarded(t, &config.Security{Basic: b})
	c := h2cClient()
	send := func(g *guarded, h http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.url+"/svc/Method", strings.NewReader(""))
		req.Header = h
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("answered over %s", resp.Proto)
		}
		return resp
	}
	if resp := send(g, http.Header{}); resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("Www-Authenticate"), "Basic ") {
		t.Errorf("no credentials over HTTP/2: %d %q", resp.StatusCode, resp.Header.Get("Www-Authenticate"))
	}
	if resp := send(g, http.Header{"Content-Type": {"application/grpc"}}); resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "16" {
		t.Errorf("gRPC call without credentials: %d grpc-status %q, want 200 and 16", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d refused requests", n)
	}
	cred := basicHeader("bob", "bob-pw")
	if resp := send(g, http.Header{cred[0]: {cred[1]}}); resp.StatusCode != 200 {
		t.Errorf("right credentials over HTTP/2: %d", resp.StatusCode)
	}
	if seen := g.backend.last(t); strings.Contains(seen, "Authorization") {
		t.Errorf("the Authorization header reached the backend:\n%s", seen)
	}
	denied := startGuarded(t, &config.Security{Addresses: &config.AddressList{Deny: mustPrefixes(t, "127.0.0.0/8")}})
	if resp := send(denied, http.Header{"Content-Type": {"application/grpc"}}); resp.Header.Get("Grpc-Status") != "7" {
		t.Errorf("gRPC call from a denied address: grpc-status %q, want 7", resp.Header.Get("Grpc-Status"))
	}
}

// TestAttackAPIKeyHeaderCasing: the key header sent in other casings, on
// a raw HTTP/1.1 connection, is found and removed whatever its case (two
// copies in two casings are a 400): the backend never gets it.
func TestAttackAPIKeyHeaderCasing(t *testing.T) {
	k := config.NewAPIKeyAuth("X-Api-Key", "", nil, map[string]string{"key-of-ci-0123456789": "ci"})
	g := startGuarded(t, &config.Security{APIKey: k})
	addr := strings.TrimPrefix(g.url, "http://")
	for headers, want := range map[string]string{
		"x-api-key: key-of-ci-0123456789\r\n": "HTTP/1.1 200 OK",
		"X-API-KEY: key-of-ci-0123456789\r\n": "HTTP/1.1 200 OK",
		// Two copies of the header, one per casing: refused, sent nowhere.
		"x-Api-kEY: key-of-ci-0123456789\r\nX-Api-Key: key-of-ci-0123456789\r\n": "HTTP/1.1 400 Bad Request",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", headers)
		answer, _ := io.ReadAll(c)
		c.Close()
		status, _, _ := strings.Cut(string(answer), "\r\n")
		if status != want {
			t.Errorf("%q: %s, want %s", headers, status, want)
		}
	}
	for _, seen := range g.backend.requests() {
		if strings.Contains(seen, "key-of-ci") || strings.Contains(strings.ToLower(seen), "x-api-key") {
			t.Errorf("the key reached the backend:\n%s", seen)
		}
	}
}
