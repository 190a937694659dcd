package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/translate"
)

// Namespaces of the conformance base manifests.
const (
	infraNS = "gateway-conformance-infra"
	appNS   = "gateway-conformance-app-backend"
	webNS   = "gateway-conformance-web-backend"
)

// podSet is one backend Deployment of the conformance base manifests.
type podSet struct {
	namespace, service string
	replicas           int
}

// basePods are the Deployments HTTPRoute tests use. infra-backend-v3 keeps
// one replica: it counts retry attempts in memory.
func basePods() []podSet {
	return []podSet{
		{infraNS, "infra-backend-v1", 2},
		{infraNS, "infra-backend-v2", 2},
		{infraNS, "infra-backend-v3", 1},
		{appNS, "app-backend-v1", 2},
		{appNS, "app-backend-v2", 2},
		{webNS, "web-backend", 2},
	}
}

// targetPortOf says which pod port a Service port of the base manifests
// targets, by name ("" is the unnamed single port).
func targetPortOf(name string) string {
	if name == "second-port" {
		return "h2c"
	}
	return "http"
}

// confEnv is one conformance case: echo pods for the base Services,
// standalone Portico serving the base manifests plus the case's own, and a
// second reader of the same files to compute statuses.
type confEnv struct {
	t     *testing.T
	h     *harness
	src   *filesource.Source
	ports map[string]int
	pods  map[string][]*echoPod // "namespace/service"
	cert  testCert
	roots *x509.CertPool
	files map[string]string // rendered, by file name
}

// startConformance starts echo pods and Portico for the manifest
// testdata/httproute/<manifest>.yaml ("" for the base alone).
func startConformance(t *testing.T, manifest string) *confEnv {
	t.Helper()
	e := &confEnv{
		t:     t,
		ports: map[string]int{},
		pods:  map[string][]*echoPod{},
		cert:  newTestCertFor(t, "*.org", "*.wildcard.org"),
		roots: x509.NewCertPool(),
		files: map[string]string{},
	}
	e.roots.AddCert(e.cert.leaf)
	for _, bp := range basePods() {
		e.pods[bp.namespace+"/"+bp.service] = startEchoPods(t, bp.namespace, bp.service, bp.replicas)
	}
	e.files["00-base.yaml"] = e.render("base")
	if manifest != "" {
		e.files["10-case.yaml"] = e.render(manifest)
	}
	e.files["20-endpoints.yaml"] = e.endpointSlices()
	e.h = startStandalone(t, e.files)
	e.src = filesource.New(e.h.dir, zap.NewNop())
	return e
}

// render executes a manifest template of testdata/httproute.
func (e *confEnv) render(name string) string {
	e.t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "httproute", name+".yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	tmpl, err := template.New(name).Funcs(template.FuncMap{
		"port":      e.port,
		"podPort":   e.podPort,
		"endpoints": e.endpointsYAML,
		"endpoint":  e.endpointYAML,
		"indent":    indent,
		"certPEM":   func() string { return e.cert.certPEM },
		"keyPEM":    func() string { return e.cert.keyPEM },
	}).Parse(string(raw))
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, nil); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}

// port returns the port standing in for a Gateway port, by label; the
// same label always gives the same port.
func (e *confEnv) port(label string) int {
	if p, ok := e.ports[label]; ok {
		return p
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free port for %s: %v", label, err))
	}
	defer ln.Close()
	p := ln.Addr().(*net.TCPAddr).Port
	e.ports[label] = p
	return p
}

func (e *confEnv) podsOf(service string) []*echoPod {
	pods, ok := e.pods[service]
	if !ok {
		panic("no pods for Service " + service)
	}
	return pods
}

// podPort returns the port the pods of a Service listen on: "http" or "h2c".
func (e *confEnv) podPort(service, kind string) int {
	p := e.podsOf(service)[0]
	if kind == "h2c" {
		return p.h2cPort
	}
	return p.httpPort
}

// endpointsYAML lists the ready endpoints of a Service's pods as a YAML
// flow sequence, for EndpointSlices written in a manifest.
func (e *confEnv) endpointsYAML(service string) string {
	var eps []string
	for i := range e.podsOf(service) {
		eps = append(eps, e.endpointYAML(service, i, "ready"))
	}
	return "[" + strings.Join(eps, ", ") + "]"
}

// endpointYAML is one endpoint, the i-th pod of a Service, as a YAML flow
// mapping: state is "ready", "terminating" (still serving) or "notready".
func (e *confEnv) endpointYAML(service string, i int, state string) string {
	p := e.podsOf(service)[i]
	cond := map[string]string{
		"ready":       "{ready: true, serving: true, terminating: false}",
		"terminating": "{ready: false, serving: true, terminating: true}",
		"notready":    "{ready: false, serving: false, terminating: false}",
	}[state]
	if cond == "" {
		panic("unknown endpoint state " + state)
	}
	return fmt.Sprintf("{addresses: [%s], conditions: %s, targetRef: {kind: Pod, namespace: %s, name: %s}}", p.ip, cond, p.namespace, p.name)
}

// endpointSlices writes, for each base Service, the EndpointSlice the
// endpointslice controller would make from its pods.
func (e *confEnv) endpointSlices() string {
	var docs []string
	for _, bp := range basePods() {
		key := bp.namespace + "/" + bp.service
		names := []string{""}
		if bp.service == "infra-backend-v1" {
			names = []string{"first-port", "second-port", "third-port"}
		}
		var ports []string
		for _, n := range names {
			ports = append(ports, fmt.Sprintf("- {name: %q, port: %d, protocol: TCP}", n, e.podPort(key, targetPortOf(n))))
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s-x7k2p
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports:
%[3]s
endpoints: %[4]s
`, bp.namespace, bp.service, strings.Join(ports, "\n"), e.endpointsYAML(key)))
	}
	return strings.Join(docs, "---\n")
}

// update replaces one config file and waits until Portico applied it.
func (e *confEnv) update(t testing.TB, name, content string) {
	t.Helper()
	gen := e.h.s.Generation()
	e.files[name] = content
	// Replaced by rename, as the file source expects of editors.
	tmp := filepath.Join(e.h.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.h.dir, name)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); e.h.s.Generation() <= gen; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the new config was never applied", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// statuses translates the files as they are now.
func (e *confEnv) statuses(t testing.TB) (*snapshot.Resources, *status.Computed) {
	t.Helper()
	res, err := e.src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := translate.Translate(translate.Settings{}, res, translate.Memory{})
	return res, out.Statuses
}

// withoutObject drops the document of one kind and name from a manifest.
func withoutObject(manifest, kind, name string) string {
	docs := strings.Split(manifest, "\n---\n")
	out := docs[:0]
	for _, d := range docs {
		if strings.Contains(d, "kind: "+kind+"\n") && strings.Contains(d, "name: "+name+"\n") {
			continue
		}
		out = append(out, d)
	}
	return strings.Join(out, "\n---\n")
}

func newTestCertFor(t testing.TB, hosts ...string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: hosts[0]},
		DNSNames:     hosts,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
		leaf:    leaf,
	}
}

// gwClient sends requests to one Gateway port whatever the URL says.
type gwClient struct {
	*http.Client
	scheme string
	addr   string // the Host of requests that name none
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// client returns a plain HTTP/1.1 client for the Gateway port of label.
func (e *confEnv) client(label string) *gwClient {
	addr := fmt.Sprintf("127.0.0.1:%d", e.port(label))
	d := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &gwClient{Client: &http.Client{Timeout: 10 * time.Second, Transport: tr, CheckRedirect: noRedirects}, scheme: "http", addr: addr}
}

// h2cClient speaks HTTP/2 with prior knowledge, in cleartext.
func (e *confEnv) h2cClient(label string) *gwClient {
	addr := fmt.Sprintf("127.0.0.1:%d", e.port(label))
	d := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, _ string, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &gwClient{Client: &http.Client{Timeout: 10 * time.Second, Transport: tr, CheckRedirect: noRedirects}, scheme: "http", addr: addr}
}

// tlsClient sends serverName as SNI and trusts the base certificate; h2
// selects HTTP/2 (ALPN h2) over HTTP/1.1.
func (e *confEnv) tlsClient(label, serverName string, h2 bool) *gwClient {
	addr := fmt.Sprintf("127.0.0.1:%d", e.port(label))
	d := &net.Dialer{Timeout: 2 * time.Second}
	cfg := &tls.Config{ServerName: serverName, RootCAs: e.roots}
	dial := func(ctx context.Context, network string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if h2 {
			c.NextProtos = []string{"h2"}
		}
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
	var rt http.RoundTripper
	if h2 {
		tr := &http2.Transport{DialTLSContext: func(ctx context.Context, network, _ string, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, network)
		}}
		e.t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	} else {
		tr := &http.Transport{DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dial(ctx, network)
		}}
		e.t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	}
	return &gwClient{Client: &http.Client{Timeout: 10 * time.Second, Transport: rt, CheckRedirect: noRedirects}, scheme: "https", addr: addr}
}

// request is what a case sends.
type request struct {
	Host    string // "" sends the Gateway address
	Method  string // "" is GET
	Path    string // path and query
	Headers map[string]string
}

// seen is what the backend must have received.
type seen struct {
	Host    string // "" is not checked
	Method  string // "" is GET
	Path    string // the request target, query included
	Headers map[string]string
	Absent  []string
}

// redirect is the expected Location. Empty fields default as the
// conformance suite does: any host, the request's scheme and path, and
// for the port the scheme's well-known one (or none).
type redirect struct {
	Scheme, Host, Port, Path string
}

// expect is one request and everything asserted about its answer,
// following the conformance suite's rules: the backend and request checks
// apply to 200 and 204 answers, the Location checks to redirects.
type expect struct {
	Req       request
	Status    []int // default 200
	Backend   string
	Namespace string
	// Seen defaults to the request itself.
	Seen *seen
	// EchoSet asks the echo pod to answer with these headers.
	EchoSet  map[string]string
	Headers  map[string]string   // response headers, values joined with ","
	OneOf    map[string][]string // response headers with several acceptable values
	Absent   []string            // response headers that must be missing
	IgnoreWS bool                // compare header values without spaces
	Redirect *redirect
}

func (x expect) name(i int) string {
	s := fmt.Sprintf("%d %s %s%s", i, cmpOr(x.Req.Method, "GET"), x.Req.Host, x.Req.Path)
	if x.Backend != "" {
		return s + " to " + x.Backend
	}
	return fmt.Sprint(s, " answers ", x.statuses())
}

func (x expect) statuses() []int {
	if len(x.Status) == 0 {
		return []int{http.StatusOK}
	}
	return x.Status
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// roundTrip sends a request and returns the answer, the body read.
func (c *gwClient) roundTrip(r request, echoSet map[string]string) (*http.Response, []byte, error) {
	host := cmpOr(r.Host, c.addr)
	req, err := http.NewRequest(cmpOr(r.Method, "GET"), c.scheme+"://"+host+r.Path, nil)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	if len(echoSet) > 0 {
		var kvs []string
		for k, v := range echoSet {
			kvs = append(kvs, k+":"+v)
		}
		req.Header.Set("X-Echo-Set-Header", strings.Join(kvs, ","))
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL, err)
	}
	return resp, body, nil
}

// check sends x.Req and asserts x; it returns what the backend reported,
// nil when the answer did not come from an echo pod.
func (c *gwClient) check(t testing.TB, x expect) *echoReply {
	t.Helper()
	reply, err := c.verify(x)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// verify is check for any goroutine: it reports what is wrong as an error.
func (c *gwClient) verify(x expect) (*echoReply, error) {
	resp, body, err := c.roundTrip(x.Req, x.EchoSet)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(x.statuses(), resp.StatusCode) {
		return nil, fmt.Errorf("status %d, want one of %v; body %q", resp.StatusCode, x.statuses(), body)
	}
	var reply *echoReply
	if resp.Header.Get("Content-Type") == "application/json" {
		reply = &echoReply{}
		if err := json.Unmarshal(body, reply); err != nil {
			return nil, fmt.Errorf("echo reply: %w", err)
		}
	}
	var p problems
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent:
		checkSeen(&p, x, reply)
		checkHeaders(&p, x, resp.Header)
	case isRedirect(resp.StatusCode) && x.Redirect != nil:
		checkRedirect(&p, c, x, resp)
	}
	return reply, p.err()
}

// problems collects what a check found wrong.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(p, "\n"))
}

func isRedirect(code int) bool {
	switch code {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}

func checkSeen(p *problems, x expect, reply *echoReply) {
	want := seen{Method: x.Req.Method, Path: x.Req.Path, Headers: x.Req.Headers}
	if x.Seen != nil {
		want = *x.Seen
	}
	got := reply
	if got == nil {
		// Not an echo: nothing reached a backend, which must be what the
		// case expects.
		got = &echoReply{Method: cmpOr(x.Req.Method, "GET")}
	}
	if want.Host != "" && got.Host != want.Host {
		p.add("backend saw Host %q, want %q", got.Host, want.Host)
	}
	if got.Path != want.Path {
		p.add("backend saw path %q, want %q", got.Path, want.Path)
	}
	if m := cmpOr(want.Method, "GET"); got.Method != m {
		p.add("backend saw method %q, want %q", got.Method, m)
	}
	if got.Namespace != x.Namespace {
		p.add("answered from namespace %q, want %q", got.Namespace, x.Namespace)
	}
	if !strings.HasPrefix(got.Pod, x.Backend) {
		p.add("answered by pod %q, want one of %s", got.Pod, x.Backend)
	}
	headers := http.Header(got.Headers)
	for name, v := range want.Headers {
		vals := headers.Values(name)
		if len(vals) == 0 {
			p.add("backend did not see header %s; it saw %v", name, got.Headers)
		} else if j := strings.Join(vals, ","); j != v {
			p.add("backend saw header %s: %q, want %q", name, j, v)
		}
	}
	for _, name := range want.Absent {
		if vals := headers.Values(name); len(vals) > 0 {
			p.add("backend saw header %s: %q, want none", name, vals)
		}
	}
}

func checkHeaders(p *problems, x expect, h http.Header) {
	norm := func(s string) string {
		if x.IgnoreWS {
			return strings.ReplaceAll(s, " ", "")
		}
		return s
	}
	for name, v := range x.Headers {
		vals := h.Values(name)
		if len(vals) == 0 {
			p.add("response header %s missing; got %v", name, h)
		} else if j := strings.Join(vals, ","); norm(j) != norm(v) {
			p.add("response header %s: %q, want %q", name, j, v)
		}
	}
	for name, options := range x.OneOf {
		vals := h.Values(name)
		if len(vals) == 0 {
			p.add("response header %s missing; got %v", name, h)
			continue
		}
		j := norm(strings.Join(vals, ","))
		if !slices.ContainsFunc(options, func(o string) bool { return norm(o) == j }) {
			p.add("response header %s: %q, want one of %q", name, j, options)
		}
	}
	for _, name := range x.Absent {
		if vals := h.Values(name); len(vals) > 0 {
			p.add("response header %s: %q, want none", name, vals)
		}
	}
}

func checkRedirect(p *problems, c *gwClient, x expect, resp *http.Response) {
	loc, err := resp.Location()
	if err != nil {
		p.add("redirect without a usable Location: %v", err)
		return
	}
	want := *x.Redirect
	want.Scheme = cmpOr(want.Scheme, c.scheme)
	path, _, _ := strings.Cut(x.Req.Path, "?")
	want.Path = cmpOr(want.Path, path)
	if want.Host != "" && loc.Hostname() != want.Host {
		p.add("Location %s: host %q, want %q", loc, loc.Hostname(), want.Host)
	}
	if loc.Scheme != want.Scheme {
		p.add("Location %s: scheme %q, want %q", loc, loc.Scheme, want.Scheme)
	}
	if loc.Path != want.Path {
		p.add("Location %s: path %q, want %q", loc, loc.Path, want.Path)
	}
	if want.Port == "" {
		if port := loc.Port(); port != "" && port != map[string]string{"http": "80", "https": "443"}[loc.Scheme] {
			p.add("Location %s: port %q, want the scheme's default", loc, port)
		}
	} else if loc.Port() != want.Port {
		p.add("Location %s: port %q, want %q", loc, loc.Port(), want.Port)
	}
}

// runCases runs each case as a subtest through c.
func runCases(t *testing.T, c *gwClient, cases []expect) {
	t.Helper()
	for i, x := range cases {
		t.Run(x.name(i), func(t *testing.T) { c.check(t, x) })
	}
}

// Statuses.

// parentStatus finds the status of a route for the Gateway it names.
func parentStatus(t testing.TB, st *status.Computed, route, gateway types.NamespacedName) gwv1.RouteParentStatus {
	t.Helper()
	for _, ps := range st.HTTPRoutes.At(route) {
		ns := route.Namespace
		if ps.ParentRef.Namespace != nil {
			ns = string(*ps.ParentRef.Namespace)
		}
		kind := "Gateway"
		if ps.ParentRef.Kind != nil {
			kind = string(*ps.ParentRef.Kind)
		}
		if kind == "Gateway" && ns == gateway.Namespace && string(ps.ParentRef.Name) == gateway.Name {
			return ps
		}
	}
	t.Fatalf("HTTPRoute %s has no status for Gateway %s; it has %+v", route, gateway, st.HTTPRoutes.At(route))
	return gwv1.RouteParentStatus{}
}

// mustHaveCondition asserts one condition of a route's status for a
// Gateway; an empty reason accepts any. Every condition must be about the
// route's current generation.
func mustHaveCondition(t testing.TB, res *snapshot.Resources, st *status.Computed, route, gateway types.NamespacedName, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	ps := parentStatus(t, st, route, gateway)
	if ps.ControllerName != wellknown.ControllerName {
		t.Errorf("HTTPRoute %s: controllerName %q", route, ps.ControllerName)
	}
	c := meta.FindStatusCondition(ps.Conditions, typ)
	if c == nil {
		t.Fatalf("HTTPRoute %s has no %s condition for %s: %+v", route, typ, gateway, ps.Conditions)
	}
	if c.Status != status || (reason != "" && c.Reason != reason) {
		t.Errorf("HTTPRoute %s for %s: %s=%s (%s: %s), want %s (%s)", route, gateway, typ, c.Status, c.Reason, c.Message, status, cmpOr(reason, "any reason"))
	}
	gen := routeGeneration(t, res, route)
	for _, c := range ps.Conditions {
		if c.ObservedGeneration != gen {
			t.Errorf("HTTPRoute %s condition %s observed generation %d, route is at %d", route, c.Type, c.ObservedGeneration, gen)
		}
	}
}

func routeGeneration(t testing.TB, res *snapshot.Resources, route types.NamespacedName) int64 {
	t.Helper()
	for _, r := range res.HTTPRoutes {
		if r.Namespace == route.Namespace && r.Name == route.Name {
			return r.Generation
		}
	}
	t.Fatalf("no HTTPRoute %s", route)
	return 0
}

// mustBeAccepted asserts what the suite's GatewayAndHTTPRoutesMustBeAccepted
// and HTTPRouteMustHaveResolvedRefsConditionsTrue do: each route is
// Accepted with resolved references on the Gateway.
func (e *confEnv) mustBeAccepted(t testing.TB, gateway string, routes ...string) {
	t.Helper()
	res, st := e.statuses(t)
	gw := types.NamespacedName{Namespace: infraNS, Name: gateway}
	if c := meta.FindStatusCondition(st.Gateways.At(gw).Conditions, string(gwv1.GatewayConditionAccepted)); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Gateway %s not accepted: %+v", gw, st.Gateways.At(gw).Conditions)
	}
	for _, r := range routes {
		ns, name, ok := strings.Cut(r, "/")
		if !ok {
			ns, name = infraNS, r
		}
		nn := types.NamespacedName{Namespace: ns, Name: name}
		mustHaveCondition(t, res, st, nn, gw, string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, string(gwv1.RouteReasonAccepted))
		mustHaveCondition(t, res, st, nn, gw, string(gwv1.RouteConditionResolvedRefs), metav1.ConditionTrue, string(gwv1.RouteReasonResolvedRefs))
	}
}

// attachedRoutes returns the attachedRoutes count of each listener of a
// Gateway in the infra namespace.
func attachedRoutes(st *status.Computed, gateway string) map[string]int32 {
	out := map[string]int32{}
	for _, l := range st.Gateways.At(types.NamespacedName{Namespace: infraNS, Name: gateway}).Listeners {
		out[string(l.Name)] = l.AttachedRoutes
	}
	return out
}

func infra(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: infraNS, Name: name}
}
