package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/encoding/protowire"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// Pre-routing filters (config.Listener.RequestFilters) and the
// ExternalAuth filter of HTTPRoute rules, on real sockets: authorization
// services and backends on loopback, requests through a running Runtime.

// filteredRequest is what a backend received.
type filteredRequest struct {
	host, uri, body string
	header          http.Header
}

// bodyBackend records every request with its body and answers with its
// name.
type bodyBackend struct {
	name string
	addr string
	mu   sync.Mutex
	seen []filteredRequest
}

func newBodyBackend(t *testing.T, name string) *bodyBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &bodyBackend{name: name, addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.seen = append(b.seen, filteredRequest{host: r.Host, uri: r.RequestURI, body: string(body), header: r.Header.Clone()})
		b.mu.Unlock()
		io.WriteString(w, name)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *bodyBackend) requests() []filteredRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]filteredRequest(nil), b.seen...)
}

// filtered is a proxy on loopback whose one listener runs filters before
// routing among rules: "tenant" (header X-Tenant: acme-alice) and the
// rest ("other").
type filtered struct {
	url            string
	tenant, other  *bodyBackend
	rt             *Runtime
	port           int
	routes         *config.Table
	endpointsByKey map[string][]string
}

// headerMatch is an HTTPRoute rule matching header name=value.
func headerMatch(name, value string) gwv1.HTTPRouteMatch {
	exact := gwv1.HeaderMatchExact
	return gwv1.HTTPRouteMatch{Headers: []gwv1.HTTPHeaderMatch{{Type: &exact, Name: gwv1.HTTPHeaderName(name), Value: value}}}
}

// startFiltered runs the listener with filters and, on its "tenant" rule,
// routeFilters (an HTTPRoute rule's filters).
func startFiltered(t *testing.T, filters []*config.ExtAuth, routeFilters []gwv1.HTTPRouteFilter, services map[string]string) *filtered {
	t.Helper()
	f := &filtered{tenant: newBodyBackend(t, "tenant"), other: newBodyBackend(t, "other")}
	tenantRoute := ruleRoute("tenant", gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{headerMatch("X-Tenant", "acme-alice")}, Filters: routeFilters})
	otherRoute := ruleRoute("other", gwv1.HTTPRouteRule{})
	otherRoute.Name = "r2"
	svcs := httpService("tenant", routing.Service{})
	for k, v := range httpService("other", routing.Service{}) {
		svcs[k] = v
	}
	eps := map[string][]string{"tenant": {f.tenant.addr}, "other": {f.other.addr}}
	for name, addr := range services {
		for k, v := range httpService(name, routing.Service{}) {
			svcs[k] = v
		}
		eps[name] = []string{addr}
	}
	out := compileOne(t, oneListener([]*gwv1.HTTPRoute{tenantRoute, otherRoute}, svcs))
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	f.rt = New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.rt.Close(ctx)
	})
	f.port = freePort(t)
	cfg := onePortConfig(f.port, out.Tables[0], nil, eps)
	cfg.Ports[0].All.At(0).RequestFilters = filters
	if err := f.rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	f.url = fmt.Sprintf("http://127.0.0.1:%d", f.port)
	return f
}

// send sends method path with headers h and body ("" for none; chunked
// when chunked) and returns the status and the answer's body.
func (f *filtered) send(t *testing.T, method, path string, h [][2]string, body string, chunked bool) (int, string) {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
		if chunked {
			rb = io.MultiReader(strings.NewReader(body)) // no length known: sent chunked
		}
	}
	req, err := http.NewRequest(method, f.url+path, rb)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range h {
		req.Header.Add(kv[0], kv[1])
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// httpCheck is a listener filter asking the HTTP service at addr, as an
// ExternalAuth filter compiles (only a 200 passes).
func httpCheck(addr string, toAuth, toBackend []string) *config.ExtAuth {
	return &config.ExtAuth{Address: addr, Timeout: 2 * time.Second, OnlyOK: true,
		HeadersToAuth: append([]string{"Authorization"}, toAuth...), HeadersToBackend: toBackend, AllHeadersToBackend: len(toBackend) == 0}
}

// identity answers 200 with X-User: alice for "Bearer alice", 401
// otherwise.
func identity(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer alice" {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "who are you")
		return
	}
	w.Header().Set("X-User", "alice")
	w.WriteHeader(http.StatusOK)
}

// tenancy answers 200 with X-Tenant made of the X-User it is sent, 403
// without one.
func tenancy(w http.ResponseWriter, r *http.Request) {
	u := r.Header.Get("X-User")
	if u == "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	w.Header().Set("X-Tenant", "acme-"+u)
	w.WriteHeader(http.StatusOK)
}

func TestListenerFiltersRunInOrderBeforeRouting(t *testing.T) {
	idSvc := newAuthService(t, identity)
	tenantSvc := newAuthService(t, tenancy)
	f := startFiltered(t, []*config.ExtAuth{
		httpCheck(idSvc.addr, nil, []string{"X-User"}),
		httpCheck(tenantSvc.addr, []string{"X-User"}, []string{"X-Tenant"}),
	}, nil, nil)

	code, body := f.send(t, http.MethodGet, "/orders", [][2]string{{"Authorization", "Bearer alice"}}, "", false)
	if code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the rule matching the header the second filter set", code, body)
	}
	tr, _ := tenantSvc.last(t)
	if tr.Header.Get("X-User") != "alice" {
		t.Errorf("the second filter did not see the header the first set: %v", tr.Header)
	}
	seen := f.tenant.requests()
	if len(seen) != 1 || seen[0].header.Get("X-Tenant") != "acme-alice" || seen[0].header.Get("X-User") != "alice" {
		t.Fatalf("backend saw %+v", seen)
	}
	if idSvc.requests() != 1 || tenantSvc.requests() != 1 {
		t.Errorf("each filter runs once per request: %d and %d checks", idSvc.requests(), tenantSvc.requests())
	}

	// A refusal ends the request: no later filter, no route.
	code, body = f.send(t, http.MethodGet, "/orders", [][2]string{{"Authorization", "Bearer mallory"}}, "", false)
	if code != http.StatusUnauthorized || body != "who are you" {
		t.Fatalf("refused by the first filter: %d %q, want its 401", code, body)
	}
	if tenantSvc.requests() != 1 || len(f.tenant.requests())+len(f.other.requests()) != 1 {
		t.Errorf("after a refusal the second filter or a backend was reached: %d checks, %d+%d requests",
			tenantSvc.requests(), len(f.tenant.requests()), len(f.other.requests()))
	}
}

func TestListenerFiltersOrderIsTheList(t *testing.T) {
	idSvc := newAuthService(t, identity)
	tenantSvc := newAuthService(t, tenancy)
	// The same two filters the other way round: the tenancy check runs
	// first and sees no X-User.
	f := startFiltered(t, []*config.ExtAuth{
		httpCheck(tenantSvc.addr, []string{"X-User"}, []string{"X-Tenant"}),
		httpCheck(idSvc.addr, nil, []string{"X-User"}),
	}, nil, nil)
	code, _ := f.send(t, http.MethodGet, "/", [][2]string{{"Authorization", "Bearer alice"}}, "", false)
	if code != http.StatusForbidden {
		t.Fatalf("got %d, want the first filter's 403", code)
	}
	if idSvc.requests() != 0 {
		t.Errorf("the second filter ran after the first refused")
	}
}

func TestListenerFiltersKeepHost(t *testing.T) {
	// Every header of the answer goes to the request (no
	// allowedResponseHeaders), Host and Authority among them.
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Host", "evil.example")
		w.Header().Set("Authority", "evil.example")
		w.Header().Set("X-Tenant", "acme-alice")
		w.WriteHeader(http.StatusOK)
	})
	f := startFiltered(t, []*config.ExtAuth{httpCheck(svc.addr, nil, nil)}, nil, nil)
	code, body := f.send(t, http.MethodGet, "/", nil, "", false)
	if code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the tenant rule", code, body)
	}
	seen := f.tenant.requests()
	want := fmt.Sprintf("127.0.0.1:%d", f.port)
	if seen[0].host != want || seen[0].header.Get("Authority") != "" || seen[0].header.Get("Host") != "" {
		t.Fatalf("backend saw Host %q, headers %v; want the client's Host %q and no Authority", seen[0].host, seen[0].header, want)
	}
}

func TestListenerFilterClientCannotSmuggleAllowedHeaders(t *testing.T) {
	// The service lets anonymous requests through without saying who they
	// are: the client's own X-User and X-Tenant must not pass for its.
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	f := startFiltered(t, []*config.ExtAuth{httpCheck(svc.addr, nil, []string{"X-User", "X-Tenant"})}, nil, nil)
	for _, h := range [][][2]string{
		{{"X-User", "alice"}, {"X-Tenant", "acme-alice"}},
		{{"x-tenant", "acme-alice"}, {"X-TENANT", "acme-alice"}},
	} {
		code, body := f.send(t, http.MethodGet, "/", h, "", false)
		if code != http.StatusOK || body != "other" {
			t.Fatalf("headers %v: got %d %q; a client's X-Tenant must not select the tenant rule", h, code, body)
		}
	}
	for _, s := range f.other.requests() {
		if s.header.Get("X-User") != "" || s.header.Get("X-Tenant") != "" {
			t.Fatalf("the client's identity headers reached the backend: %v", s.header)
		}
	}
	if len(f.tenant.requests()) != 0 {
		t.Fatal("the tenant backend was reached")
	}
}

func TestListenerFilterForwardsBodyWithinMaxSize(t *testing.T) {
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tenant", "acme-alice")
		w.WriteHeader(http.StatusOK)
	})
	check := httpCheck(svc.addr, nil, []string{"X-Tenant"})
	check.ForwardBody = 16
	f := startFiltered(t, []*config.ExtAuth{check}, nil, nil)
	for _, chunked := range []bool{false, true} {
		code, _ := f.send(t, http.MethodPost, "/", nil, "sixteen bytes ok", chunked)
		if code != http.StatusOK {
			t.Fatalf("chunked=%v: got %d, want 200", chunked, code)
		}
		ar, got := svc.last(t)
		if got != "sixteen bytes ok" || ar.ContentLength != 16 {
			t.Errorf("chunked=%v: the service got %q (Content-Length %d), want the whole body and its length", chunked, got, ar.ContentLength)
		}
	}
	for _, s := range f.tenant.requests() {
		if s.body != "sixteen bytes ok" {
			t.Errorf("the backend got %q, want the body unchanged", s.body)
		}
	}
	// Without a body, the service is sent Content-Length 0.
	f.send(t, http.MethodGet, "/", nil, "", false)
	if ar, got := svc.last(t); got != "" || ar.ContentLength != 0 {
		t.Errorf("no body: the service got %q (Content-Length %d)", got, ar.ContentLength)
	}
}

func TestListenerFilterRefusesBodyOverMaxSize(t *testing.T) {
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	check := httpCheck(svc.addr, nil, nil)
	check.ForwardBody = 16
	f := startFiltered(t, []*config.ExtAuth{check}, nil, nil)
	for _, chunked := range []bool{false, true} {
		code, _ := f.send(t, http.MethodPost, "/", nil, "seventeen bytes!!", chunked)
		if code != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked=%v: got %d, want 413", chunked, code)
		}
	}
	if svc.requests() != 0 || len(f.tenant.requests())+len(f.other.requests()) != 0 {
		t.Fatalf("a body over maxSize was sent on: %d checks, backends %d+%d", svc.requests(), len(f.tenant.requests()), len(f.other.requests()))
	}
}

func TestListenerFilterFailsClosedWhenServiceHangs(t *testing.T) {
	release := make(chan struct{})
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	check := httpCheck(svc.addr, nil, nil)
	check.Timeout = 200 * time.Millisecond
	f := startFiltered(t, []*config.ExtAuth{check}, nil, nil)
	code, _ := f.send(t, http.MethodGet, "/", nil, "", false)
	if code != http.StatusForbidden {
		t.Fatalf("got %d, want 403 from a service that does not answer", code)
	}
	// Nothing listens: refused too.
	f2 := startFiltered(t, []*config.ExtAuth{httpCheck(downAddress(t), nil, nil)}, nil, nil)
	if code, _ := f2.send(t, http.MethodGet, "/", nil, "", false); code != http.StatusForbidden {
		t.Fatalf("got %d, want 403 from a service that is down", code)
	}
	if len(f.tenant.requests())+len(f.other.requests())+len(f2.tenant.requests())+len(f2.other.requests()) != 0 {
		t.Fatal("a request reached a backend without an answer of its service")
	}
}

func TestRouteExternalAuthFilter(t *testing.T) {
	// The rule's filter asks Service "authz" (resolved like a backend)
	// after the listener's filter set the header the rule matches.
	tenantSvc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tenant", "acme-alice")
		w.WriteHeader(http.StatusOK)
	})
	routeSvc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") != "acme-alice" || r.URL.Path != "/authz/orders" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("X-Route-User", "alice")
		w.Header().Set("X-Dropped", "not allowed")
		w.WriteHeader(http.StatusOK)
	})
	port := gwv1.PortNumber(80)
	spec := &gwv1.HTTPExternalAuthFilter{
		ExternalAuthProtocol: gwv1.HTTPRouteExternalAuthHTTPProtocol,
		BackendRef:           gwv1.BackendObjectReference{Name: "authz", Port: &port},
		HTTPAuthConfig:       &gwv1.HTTPAuthConfig{Path: "/authz/", AllowedRequestHeaders: []string{"X-Tenant"}, AllowedResponseHeaders: []string{"X-Route-User"}},
		ForwardBody:          &gwv1.ForwardBodyConfig{MaxSize: 64},
	}
	f := startFiltered(t, []*config.ExtAuth{httpCheck(tenantSvc.addr, nil, []string{"X-Tenant"})},
		[]gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExternalAuth, ExternalAuth: spec}},
		map[string]string{"authz": routeSvc.addr})
	code, body := f.send(t, http.MethodPost, "/orders", [][2]string{{"X-Route-User", "mallory"}}, "order 7", false)
	if code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the tenant rule", code, body)
	}
	if _, got := routeSvc.last(t); got != "order 7" {
		t.Errorf("the rule's service got body %q, want %q", got, "order 7")
	}
	seen := f.tenant.requests()[0]
	if seen.header.Get("X-Route-User") != "alice" || seen.header.Get("X-Dropped") != "" || seen.body != "order 7" {
		t.Fatalf("backend saw %v with body %q", seen.header, seen.body)
	}
	// A 2xx other than 200 is a refusal for an ExternalAuth filter.
	created := newAuthService(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	f2 := startFiltered(t, []*config.ExtAuth{httpCheck(tenantSvc.addr, nil, []string{"X-Tenant"})},
		[]gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExternalAuth, ExternalAuth: spec}},
		map[string]string{"authz": created.addr})
	if code, _ := f2.send(t, http.MethodPost, "/orders", nil, "order 7", false); code != http.StatusForbidden {
		t.Fatalf("a 204 of the service: got %d, want 403", code)
	}
}

// listenerAuthzPolicy allows what the HTTP filter before it identified
// (x-user alice) when the body is "hello", and names the tenant.
const listenerAuthzPolicy = `package envoy.authz

default allow := false

allow := {
	"allowed": true,
	"headers": {"x-tenant": sprintf("acme-%s", [input.attributes.request.http.headers["x-user"]])},
} if {
	input.attributes.request.http.headers["x-user"] == "alice"
	input.attributes.request.http.body == "hello"
}
`

func TestListenerFiltersHTTPThenGRPCAgainstOPA(t *testing.T) {
	opa := startOPAAuthzPolicy(t, listenerAuthzPolicy)
	idSvc := newAuthService(t, identity)
	grpcCheck := &config.ExtAuth{GRPC: true, Address: opa, Timeout: 5 * time.Second, AllHeadersToAuth: true, ForwardBody: 32}
	f := startFiltered(t, []*config.ExtAuth{httpCheck(idSvc.addr, nil, []string{"X-User"}), grpcCheck}, nil, nil)

	code, body := f.send(t, http.MethodPost, "/", [][2]string{{"Authorization", "Bearer alice"}}, "hello", false)
	if code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the rule matching OPA's X-Tenant", code, body)
	}
	if s := f.tenant.requests()[0]; s.body != "hello" || s.header.Get("X-Tenant") != "acme-alice" {
		t.Fatalf("backend saw %q with %v", s.body, s.header)
	}
	// Another body: OPA refuses (403), the backend is not reached.
	if code, _ := f.send(t, http.MethodPost, "/", [][2]string{{"Authorization", "Bearer alice"}}, "goodbye", false); code != http.StatusForbidden {
		t.Fatalf("got %d, want OPA's 403", code)
	}
	// Over maxSize: 413 before OPA is asked.
	if code, _ := f.send(t, http.MethodPost, "/", [][2]string{{"Authorization", "Bearer alice"}}, strings.Repeat("x", 33), false); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %d, want 413", code)
	}
	if n := len(f.tenant.requests()) + len(f.other.requests()); n != 1 {
		t.Fatalf("%d requests reached backends, want 1", n)
	}
}

func TestListenerFilterOverTLSWithBackendTLSPolicy(t *testing.T) {
	// The service is behind a BackendTLSPolicy: asked over TLS, its
	// certificate checked against the policy's CA and hostname.
	svc := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tenant", "acme-alice")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(svc.Close)
	trusted := x509.NewCertPool()
	trusted.AddCert(svc.Certificate())
	check := httpCheck(strings.TrimPrefix(svc.URL, "https://"), nil, []string{"X-Tenant"})
	check.TLS = &config.BackendTLS{ID: "authz-tls", Policy: "ns/authz", ServerName: "example.com", RootCAs: trusted}
	f := startFiltered(t, []*config.ExtAuth{check}, nil, nil)
	if code, body := f.send(t, http.MethodGet, "/", nil, "", false); code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the tenant rule", code, body)
	}

	// Another CA, or another hostname: the service cannot be trusted, and
	// the request is refused.
	for _, tls := range []*config.BackendTLS{
		{ID: "other-ca", Policy: "ns/authz", ServerName: "example.com", RootCAs: x509.NewCertPool()},
		{ID: "other-name", Policy: "ns/authz", ServerName: "authz.example.net", RootCAs: trusted},
	} {
		bad := httpCheck(strings.TrimPrefix(svc.URL, "https://"), nil, []string{"X-Tenant"})
		bad.TLS = tls
		f := startFiltered(t, []*config.ExtAuth{bad}, nil, nil)
		if code, _ := f.send(t, http.MethodGet, "/", nil, "", false); code != http.StatusForbidden {
			t.Fatalf("%s: got %d, want 403", tls.ID, code)
		}
		if n := len(f.tenant.requests()) + len(f.other.requests()); n != 0 {
			t.Fatalf("%s: %d requests reached a backend", tls.ID, n)
		}
	}
}

func TestGRPCListenerFilterKeepsHost(t *testing.T) {
	// An allowing CheckResponse that sets Host, :authority and Authority
	// along with the header routes match on.
	okWith := func(kv ...string) []byte {
		var ok []byte
		for i := 0; i+1 < len(kv); i += 2 {
			var h []byte
			h = protowire.AppendTag(h, headerKey, protowire.BytesType)
			h = protowire.AppendString(h, kv[i])
			h = protowire.AppendTag(h, headerValue, protowire.BytesType)
			h = protowire.AppendString(h, kv[i+1])
			var opt []byte
			opt = protowire.AppendTag(opt, headerOptionHeader, protowire.BytesType)
			opt = protowire.AppendBytes(opt, h)
			ok = protowire.AppendTag(ok, okHeaders, protowire.BytesType)
			ok = protowire.AppendBytes(ok, opt)
		}
		out := protowire.AppendTag(nil, checkResponseStatus, protowire.BytesType)
		out = protowire.AppendBytes(out, nil)
		out = protowire.AppendTag(out, checkResponseOK, protowire.BytesType)
		return protowire.AppendBytes(out, ok)
	}
	addr := rawAuthz(t, func(context.Context) ([]byte, error) {
		return okWith("host", "evil.example", ":authority", "evil.example", "authority", "evil.example", "x-tenant", "acme-alice"), nil
	})
	f := startFiltered(t, []*config.ExtAuth{{GRPC: true, Address: addr, Timeout: 2 * time.Second, AllHeadersToAuth: true}}, nil, nil)
	code, body := f.send(t, http.MethodGet, "/", nil, "", false)
	if code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the tenant rule", code, body)
	}
	seen := f.tenant.requests()[0]
	if want := fmt.Sprintf("127.0.0.1:%d", f.port); seen.host != want || seen.header.Get("Authority") != "" {
		t.Fatalf("backend saw Host %q and %v, want Host %q and no Authority", seen.host, seen.header, want)
	}

	// A service that never answers: 403 once the timeout passes, nothing
	// reaches a backend.
	hang := rawAuthz(t, func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() })
	f2 := startFiltered(t, []*config.ExtAuth{{GRPC: true, Address: hang, Timeout: 200 * time.Millisecond}}, nil, nil)
	if code, _ := f2.send(t, http.MethodGet, "/", nil, "", false); code != http.StatusForbidden {
		t.Fatalf("a hanging service: %d, want 403", code)
	}
	if n := len(f2.tenant.requests()) + len(f2.other.requests()); n != 0 {
		t.Fatalf("%d requests reached a backend", n)
	}
}

func TestListenerFiltersOverHTTP2(t *testing.T) {
	// Over h2c: the :authority stays, the body (of no declared length)
	// goes to the service and on to the backend, and one over maxSize is
	// refused.
	svc := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Host", "evil.example")
		w.Header().Set("X-Tenant", "acme-alice")
		w.WriteHeader(http.StatusOK)
	})
	check := httpCheck(svc.addr, nil, nil)
	check.ForwardBody = 8
	f := startFiltered(t, []*config.ExtAuth{check}, nil, nil)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/h2", io.MultiReader(strings.NewReader(body)))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 {
			t.Fatalf("answered over %s", resp.Proto)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := post("12345678"); code != http.StatusOK || body != "tenant" {
		t.Fatalf("got %d %q, want 200 from the tenant rule", code, body)
	}
	if _, got := svc.last(t); got != "12345678" {
		t.Errorf("the service got %q", got)
	}
	seen := f.tenant.requests()[0]
	if want := fmt.Sprintf("127.0.0.1:%d", f.port); seen.host != want || seen.body != "12345678" {
		t.Fatalf("backend saw Host %q and body %q, want %q and the body", seen.host, seen.body, want)
	}
	if code, _ := post("123456789"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over maxSize: %d, want 413", code)
	}
	if svc.requests() != 1 || len(f.tenant.requests())+len(f.other.requests()) != 1 {
		t.Fatal("a body over maxSize was sent on")
	}
}
