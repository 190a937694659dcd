package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// The attacks of this file are backends that misbehave around the moment a
// pooled connection of the direct path is taken, its request head sent and
// the answer awaited: data or a close while the connection sits idle, a
// close or reset once the request is sent, early answers, heads larger than
// the write buffer, backends that do not read, clients and timeouts that
// end the wait, many clients on few connections. Every request carries a
// token (tokenRE) that the backend echoes in an X-Tok header and the body;
// answers nobody asked for carry "EVIL". The backend counts the requests it
// read per token, so that a request sent twice, or a request that cannot be
// sent again resent, shows.

// tokBackend is a backend on loopback that counts the requests it reads
// per token (the last segment of the path) and hands each to act.
type tokBackend struct {
	addr     string
	accepted func() int
	mu       sync.Mutex
	seen     map[string]int
}

// tokRequest is one request a tokBackend read.
type tokRequest struct {
	method, path, tok string
	head              []string
	n                 int // its index on its connection: 0 on a new one
}

// newTokBackend serves act for each request it reads; act answers (or
// not) and reports whether the connection goes on.
func newTokBackend(t *testing.T, act func(c net.Conn, br *bufio.Reader, r *tokRequest) bool) *tokBackend {
	t.Helper()
	b := &tokBackend{seen: map[string]int{}}
	b.addr, b.accepted = scriptedBackend(t, b.serve(act))
	return b
}

// serve is the loop of a tokBackend's connection.
func (b *tokBackend) serve(act func(c net.Conn, br *bufio.Reader, r *tokRequest) bool) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			head, err := readHead(br)
			if err != nil || len(head) == 0 {
				return
			}
			r := tokRequestOf(head, n)
			b.count(r)
			if !act(c, br, r) {
				return
			}
		}
	}
}

// newLineFirstTokBackend is newTokBackend for a backend that acts on a
// request's line before the rest of its head arrived: act gets the
// request as its line says and reads the rest of the head itself.
func newLineFirstTokBackend(t *testing.T, act func(c net.Conn, br *bufio.Reader, r *tokRequest) bool) *tokBackend {
	t.Helper()
	b := &tokBackend{seen: map[string]int{}}
	b.addr, b.accepted = scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			r := tokRequestOf([]string{strings.TrimRight(line, "\r\n")}, n)
			b.count(r)
			if !act(c, br, r) {
				return
			}
		}
	})
	return b
}

// count records that r reached the backend.
func (b *tokBackend) count(r *tokRequest) {
	b.mu.Lock()
	b.seen[r.tok]++
	b.mu.Unlock()
}

func tokRequestOf(head []string, n int) *tokRequest {
	method, rest, _ := strings.Cut(head[0], " ")
	path, _, _ := strings.Cut(rest, " ")
	return &tokRequest{method: method, path: path, tok: path[strings.LastIndexByte(path, '/')+1:], head: head, n: n}
}

// received is how many times the request with tok reached the backend.
func (b *tokBackend) received(tok string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[tok]
}

// tokAnswer is the answer to the request with tok, body included even for
// HEAD (whose client reads none: a backend that sends it anyway is
// another attack, not this file's).
func tokAnswer(tok, method string) string {
	if method == http.MethodHead {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Tok: %s\r\nContent-Length: %d\r\n\r\n", tok, len(tok))
	}
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Tok: %s\r\nContent-Length: %d\r\n\r\n%s", tok, len(tok), tok)
}

// strayAnswer is a whole answer nobody asked for.
const strayAnswer = "HTTP/1.1 408 Request Timeout\r\nX-Tok: EVIL\r\nContent-Length: 4\r\n\r\nEVIL"

// tokReply is what a client got.
type tokReply struct {
	status int
	tok    string // X-Tok
	body   string
	err    error
}

// okFor reports whether r is the whole answer to the request with tok.
func (r tokReply) okFor(tok, method string) bool {
	want := tok
	if method == http.MethodHead {
		want = ""
	}
	return r.err == nil && r.status == 200 && r.tok == tok && r.body == want
}

func (r tokReply) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("%d X-Tok %q body %q", r.status, r.tok, trunc([]byte(r.body)))
}

// tokToken is a fresh token from n.
func tokToken(n *atomic.Int64) string { return fmt.Sprintf("tk%06dk", n.Add(1)) }

// askTok sends method path (ending with a token) with extra header lines
// to Portico at addr on a new client connection and reads the answer,
// within a deadline: a wait that never ends fails as an error.
func askTok(addr, method, path, extra string) tokReply {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return tokReply{err: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	raw := method + " " + path + " HTTP/1.1\r\nHost: app.example.com\r\n" + extra
	if method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions {
		raw += "Content-Length: 0\r\n"
	}
	if _, err := io.WriteString(c, raw+"\r\n"); err != nil {
		return tokReply{err: err}
	}
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return tokReply{err: fmt.Errorf("%s %s: %w", method, path, err)}
		}
		if resp.StatusCode < 200 {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return tokReply{err: fmt.Errorf("%s %s: body: %w", method, path, err)}
		}
		return tokReply{status: resp.StatusCode, tok: resp.Header.Get("X-Tok"), body: string(b)}
	}
}

// checkOwn fails unless r carries no token but tok's.
func checkOwn(t *testing.T, what, tok string, r tokReply) {
	t.Helper()
	if r.tok == "EVIL" || strings.Contains(r.body, "EVIL") {
		t.Errorf("%s: an answer nobody asked for reached the client: %v", what, r)
	}
	for _, m := range tokenRE.FindAllString(r.tok+" "+r.body, -1) {
		if m != tok {
			t.Errorf("%s: another request's answer (%s): %v", what, m, r)
		}
	}
}

// methodCase is a request method, with the header lines that make it
// replayable or not.
type methodCase struct {
	method, extra string
	replayable    bool
}

var awaitMethods = []methodCase{
	{"GET", "", true},
	{"HEAD", "", true},
	{"OPTIONS", "", true},
	{"POST", "Idempotency-Key: k1\r\n", true},
	{"DELETE", "X-Idempotency-Key: k2\r\n", true},
	{"POST", "", false},
	{"DELETE", "", false},
	{"PUT", "", false},
	{"PATCH", "", false},
	{"PURGE", "", false},
}

func (m methodCase) String() string {
	if m.extra != "" {
		k, _, _ := strings.Cut(m.extra, ":")
		return m.method + "+" + k
	}
	return m.method
}

// resetConn closes c with a reset instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// TestAwaitStaleIdleConnection: a pooled connection on which the backend,
// while it sat idle, sent an answer nobody asked for (whole or in part,
// keeping the connection or closing it), or which it closed or reset, is
// not used for the next request, whatever its method: the request goes on
// another connection, reaches the backend once, and its client gets its
// own answer. A request that cannot be sent again must not be lost (502)
// for a connection found stale before it was sent.
func TestAwaitStaleIdleConnection(t *testing.T) {
	for _, stale := range []struct {
		name string
		do   func(c net.Conn) (keep bool)
	}{
		{"stray answer, kept open", func(c net.Conn) bool { io.WriteString(c, strayAnswer); return true }},
		{"stray answer, closed", func(c net.Conn) bool { io.WriteString(c, strayAnswer); return false }},
		{"stray partial head, kept open", func(c net.Conn) bool { io.WriteString(c, strayAnswer[:20]); return true }},
		{"closed", func(net.Conn) bool { return false }},
		{"reset", func(c net.Conn) bool { resetConn(c); return false }},
	} {
		t.Run(stale.name, func(t *testing.T) {
			b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
				io.WriteString(c, tokAnswer(r.tok, r.method))
				if strings.Contains(r.path, "/warm/") {
					time.Sleep(20 * time.Millisecond)
					return stale.do(c)
				}
				return true
			})
			addr := directPort(t, b.addr)
			var n atomic.Int64
			for _, m := range awaitMethods {
				warmUp(t, addr, &n)
				time.Sleep(80 * time.Millisecond) // the backend makes the connection stale meanwhile
				tok := tokToken(&n)
				r := askTok(addr, m.method, "/svc/after/"+tok, m.extra)
				checkOwn(t, m.String(), tok, r)
				if !r.okFor(tok, m.method) {
					t.Errorf("%v after a stale connection: %v, want its own answer", m, r)
				}
				if got := b.received(tok); got != 1 {
					t.Errorf("%v after a stale connection reached the backend %d times, want 1", m, got)
				}
			}
		})
	}
}

// TestAwaitBackendDropsSentRequest: the backend reads a request on a
// reused connection and then closes or resets it without a byte of
// answer (as one closing an idle connection in a race does): a request
// that may be sent again (http.Transport's rule: GET, HEAD, OPTIONS,
// TRACE, or an idempotency key) is sent once more on a new connection and
// answered; any other gets a 502 and is not sent again. Once a byte of
// answer came (part of a head, a 1xx) nothing is sent again.
func TestAwaitBackendDropsSentRequest(t *testing.T) {
	for _, drop := range []struct {
		name       string
		do         func(c net.Conn)
		nothingYet bool // no byte of answer reached Portico
	}{
		{"closed", func(net.Conn) {}, true},
		{"reset", resetConn, true},
		{"part of a head, closed", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nX-To") }, false},
		{"1xx, closed", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n") }, false},
		{"1xx, reset", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n")
			time.Sleep(20 * time.Millisecond) // the 102 is read before the reset
			resetConn(c)
		}, false},
	} {
		t.Run(drop.name, func(t *testing.T) {
			b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
				if strings.Contains(r.path, "/drop/") && r.n > 0 {
					drop.do(c)
					return false
				}
				io.WriteString(c, tokAnswer(r.tok, r.method))
				return true
			})
			addr := directPort(t, b.addr)
			var n atomic.Int64
			for _, m := range awaitMethods {
				warmUp(t, addr, &n)
				tok := tokToken(&n)
				r := askTok(addr, m.method, "/svc/drop/"+tok, m.extra)
				checkOwn(t, m.String(), tok, r)
				got := b.received(tok)
				switch {
				case drop.nothingYet && m.replayable:
					if !r.okFor(tok, m.method) || got != 2 {
						t.Errorf("%v: %v, reached the backend %d times; want its own answer after being sent again once", m, r, got)
					}
				default:
					if r.err != nil || r.status != http.StatusBadGateway || got != 1 {
						t.Errorf("%v: %v, reached the backend %d times; want a 502 after being sent once", m, r, got)
					}
				}
			}
		})
	}
}

// TestAwaitBigHeads: request heads around and past the 4 KiB write buffer,
// which leave in more than one write, on reused connections (some found
// stale first): each reaches the backend once and whole, and its client
// gets its own answer. A backend that answers as soon as it has the
// request line, before the rest of the head arrived (a server may answer
// before it has read the whole request, as one refusing it does), is
// answered too, and the request not sent a second time on that
// answer's account.
func TestAwaitBigHeads(t *testing.T) {
	sizes := []int{3000, 4000, 4060, 4096, 4200, 8192, 9000, 30000, 60000}
	for _, early := range []bool{false, true} {
		name := "answer after the head"
		if early {
			name = "answer on the request line"
		}
		t.Run(name, func(t *testing.T) {
			b := newLineFirstTokBackend(t, func(c net.Conn, br *bufio.Reader, r *tokRequest) bool {
				if early {
					io.WriteString(c, tokAnswer(r.tok, r.method))
				}
				rest, err := readHead(br)
				if err != nil {
					return false
				}
				pad := 0
				for _, l := range rest {
					if v, ok := strings.CutPrefix(l, "X-Pad: "); ok {
						pad = len(v)
					}
				}
				if !early {
					body := fmt.Sprintf("%s %d", r.tok, pad)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Tok: %s\r\nContent-Length: %d\r\n\r\n%s", r.tok, len(body), body)
				}
				if strings.Contains(r.path, "/stale/") {
					time.Sleep(20 * time.Millisecond)
					io.WriteString(c, strayAnswer)
				}
				return true
			})
			addr := directPort(t, b.addr)
			var n atomic.Int64
			for i, size := range sizes {
				for _, method := range []string{"GET", "POST"} {
					tok := tokToken(&n)
					path := "/svc/big/" + tok
					if i%3 == 1 {
						path = "/svc/stale/" + tok
					}
					r := askTok(addr, method, path, "X-Pad: "+strings.Repeat("p", size)+"\r\n")
					checkOwn(t, fmt.Sprintf("%s with %d bytes of header", method, size), tok, r)
					want := fmt.Sprintf("%s %d", tok, size)
					if early {
						want = tok
					}
					if r.err != nil || r.status != 200 || r.tok != tok || r.body != want {
						t.Errorf("%s with %d bytes of header: %v, want %q", method, size, r, want)
					}
					if got := b.received(tok); got != 1 {
						t.Errorf("%s with %d bytes of header reached the backend %d times", method, size, got)
					}
					if i%3 == 1 {
						time.Sleep(60 * time.Millisecond)
					}
				}
			}
		})
	}
}

// awaitRuntime serves a plain HTTP port whose one route goes to backend
// with timeouts, on a runtime with opts changed by set; it returns the
// runtime and the port's address.
func awaitRuntime(t *testing.T, set func(*Options), backend string, timeouts *gwv1.HTTPRouteTimeouts) (*Runtime, string) {
	t.Helper()
	rt := relRuntime(t, set)
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", "")
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(backend))
	cfg.Ports[0].All.At(0).Routes = ruleTable(t, "svc", gwv1.HTTPRouteRule{Timeouts: timeouts})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return rt, fmt.Sprintf("127.0.0.1:%d", p)
}

// bigExtra is header lines of about size bytes in all.
func bigExtra(size int) string {
	pad := strings.Repeat("p", 64<<10)
	var b strings.Builder
	for i := range size / len(pad) {
		fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", i, pad)
	}
	return b.String()
}

// bigHead is more than the 4 MiB a loopback socket's send buffer grows to
// plus what the receiver's buffer holds: a head of this size cannot leave
// in one write to a backend that does not read.
const bigHead = 6 << 20

func bigHeads(o *Options) { o.MaxHeaderBytes = bigHead + 1<<20 }

// warmUp leaves a connection to the backend in the pool: a GET under
// /svc/warm/, whose answer the backend may follow with what makes the
// connection stale.
func warmUp(t *testing.T, addr string, n *atomic.Int64) {
	t.Helper()
	warm := tokToken(n)
	if r := askTok(addr, "GET", "/svc/warm/"+warm, ""); !r.okFor(warm, "GET") {
		t.Fatalf("warm-up: %v", r)
	}
}

// askBigOnWarmConnection sends a GET and a POST, each with a bigHead head
// under prefix on a connection a small GET left in the pool (the backend's
// serving of "/warm/" paths sets the scene): each must get its own answer
// and reach the backend once.
func askBigOnWarmConnection(t *testing.T, b *tokBackend, prefix string) {
	t.Helper()
	_, addr := awaitRuntime(t, bigHeads, b.addr, nil)
	extra := bigExtra(bigHead)
	var n atomic.Int64
	for _, method := range []string{"GET", "POST"} {
		warmUp(t, addr, &n)
		tok := tokToken(&n)
		r := askTok(addr, method, prefix+tok, extra)
		checkOwn(t, method, tok, r)
		if !r.okFor(tok, method) {
			t.Errorf("%s %s: %v, want its own answer", method, prefix, r)
		}
		if got := b.received(tok); got != 1 {
			t.Errorf("%s %s reached the backend %d times, want 1", method, prefix, got)
		}
	}
}

// TestAwaitBackendNotReading: a reused connection to a backend that
// stops reading for a while, with a request head far larger than what the
// sockets' buffers hold, so that its write goes partially and then waits
// for room: the backend gets the whole head once and its answer reaches
// the client.
func TestAwaitBackendNotReading(t *testing.T) {
	b := newTokBackend(t, func(c net.Conn, br *bufio.Reader, r *tokRequest) bool {
		io.WriteString(c, tokAnswer(r.tok, r.method))
		if strings.Contains(r.path, "/warm/") {
			time.Sleep(500 * time.Millisecond) // before reading the next head
		}
		return true
	})
	askBigOnWarmConnection(t, b, "/svc/big/")
}

// TestAwaitAbortEndsWait: on a reused connection, a request whose answer
// never comes (a small head, sent whole) or whose head cannot even leave
// (a backend that stopped reading, a head larger than the sockets hold)
// is given up when its client leaves, when the backend timeout passes
// (504), or when the server shuts down: the backend connection is closed
// at once, not when some later timeout ends the wait, and a request the
// backend read reached it once.
func TestAwaitAbortEndsWait(t *testing.T) {
	type abortKind struct {
		name     string
		timeouts *gwv1.HTTPRouteTimeouts
		// abort ends the request sent on c by the client, or the
		// runtime; it returns what the client got.
		abort func(t *testing.T, rt *Runtime, c net.Conn) tokReply
	}
	timeout := gwv1.Duration("300ms")
	readReply := func(c net.Conn) tokReply {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return tokReply{err: err}
		}
		b, _ := io.ReadAll(resp.Body)
		return tokReply{status: resp.StatusCode, tok: resp.Header.Get("X-Tok"), body: string(b)}
	}
	kinds := []abortKind{
		{"client leaves", nil, func(t *testing.T, _ *Runtime, c net.Conn) tokReply {
			time.Sleep(150 * time.Millisecond)
			c.Close()
			return tokReply{}
		}},
		{"backend timeout", &gwv1.HTTPRouteTimeouts{BackendRequest: &timeout}, func(t *testing.T, _ *Runtime, c net.Conn) tokReply {
			r := readReply(c)
			if r.status != http.StatusGatewayTimeout {
				t.Errorf("after the backend timeout: %v, want 504", r)
			}
			return r
		}},
		{"shutdown", nil, func(t *testing.T, rt *Runtime, c net.Conn) tokReply {
			time.Sleep(150 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = rt.Close(ctx)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("the runtime's Close did not return")
			}
			return readReply(c)
		}},
	}
	for _, k := range kinds {
		for _, big := range []bool{false, true} {
			name := k.name + ", answer awaited"
			if big {
				name = k.name + ", head stalled"
			}
			t.Run(name, func(t *testing.T) {
				closed := make(chan string, 2)
				// On a "stall" connection the backend stops reading after
				// the warm-up; on any other it reads the next head and
				// never answers it. Either way it reports when Portico
				// closes the connection.
				b := newTokBackend(t, func(c net.Conn, br *bufio.Reader, r *tokRequest) bool {
					if strings.Contains(r.path, "/warm") {
						io.WriteString(c, tokAnswer(r.tok, r.method))
						if !strings.Contains(r.path, "/warm-stall/") {
							return true
						}
						time.Sleep(1500 * time.Millisecond)
					}
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.Copy(io.Discard, br); err == nil {
						closed <- r.tok
					}
					return false
				})
				rt, addr := awaitRuntime(t, bigHeads, b.addr, k.timeouts)
				var n atomic.Int64
				warm, tok := tokToken(&n), tokToken(&n)
				extra, warmPath := "", "/svc/warm/"+warm
				if big {
					extra, warmPath = bigExtra(bigHead), "/svc/warm-stall/"+warm
				}
				if r := askTok(addr, "GET", warmPath, ""); !r.okFor(warm, "GET") {
					t.Fatalf("warm-up: %v", r)
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				wrote := make(chan struct{})
				go func() {
					defer close(wrote)
					io.WriteString(c, "POST /svc/hang/"+tok+" HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n"+extra+"\r\n")
				}()
				// Portico reads a head whole before it forwards it: the
				// abort begins once it has, or a client that leaves on a
				// loaded machine may leave before its request existed.
				select {
				case <-wrote:
				case <-time.After(5 * time.Second):
					t.Fatal("Portico did not read the request's head")
				}
				start := time.Now()
				r := k.abort(t, rt, c)
				checkOwn(t, name, tok, r)
				want := tok
				if big {
					want = warm // the stalled head is never read whole
				}
				select {
				case got := <-closed:
					if got != want {
						t.Errorf("the connection of %s closed, want %s's", got, want)
					}
					t.Logf("closed %v after the abort began", time.Since(start))
				case <-time.After(10 * time.Second):
					t.Error("the backend connection stayed open after the request was given up")
				}
				if !big {
					if got := b.received(tok); got != 1 {
						t.Errorf("the request reached the backend %d times, want 1", got)
					}
				}
			})
		}
	}
}

// TestAwaitAbortStorm: clients that leave at every moment around the
// sending of their request and the coming of its answer, on connections
// taken from the pool and given back: no abort may leave its mark on a
// connection that goes back to the pool (a deadline in the past, a
// half-sent head, an answer not read), so that requests that cannot be
// sent again, sent afterwards, are all answered, each with its own
// answer. Over HTTP/1.1 the client resets its connection; over HTTP/2 it
// resets the stream.
func TestAwaitAbortStorm(t *testing.T) {
	t.Run("HTTP/1.1", func(t *testing.T) {
		awaitStorm(t, func(addr, tok string) error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			io.WriteString(c, "POST /svc/storm/"+tok+" HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n\r\n")
			time.Sleep(rand.N(2 * time.Millisecond))
			resetConn(c)
			return nil
		})
	})
	t.Run("HTTP/2", func(t *testing.T) {
		c := h2cClient()
		t.Cleanup(c.CloseIdleConnections)
		awaitStorm(t, func(addr, tok string) error {
			ctx, cancel := context.WithTimeout(context.Background(), rand.N(2*time.Millisecond))
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/svc/storm/"+tok, nil)
			req.Host = "app.example.com"
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return nil
		})
	})
}

// awaitStorm sends requests that abort leaves at random moments, from a
// few goroutines at once, to a backend answering after random short
// delays, then checks the requests that follow.
func awaitStorm(t *testing.T, abort func(addr, tok string) error) {
	b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
		if d := rand.N(1500 * time.Microsecond); d > 500*time.Microsecond {
			time.Sleep(d - 500*time.Microsecond)
		}
		_, err := io.WriteString(c, tokAnswer(r.tok, r.method))
		return err == nil
	})
	addr := directPort(t, b.addr)
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if err := abort(addr, tokToken(&n)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range 40 {
		tok := tokToken(&n)
		r := askTok(addr, "POST", "/svc/after/"+tok, "")
		checkOwn(t, "POST after the storm", tok, r)
		if !r.okFor(tok, "POST") {
			t.Fatalf("POST %d after the storm: %v, want its own answer", i, r)
		}
	}
}

// TestAwaitTimeoutStorm: a backend timeout of a few milliseconds against
// a backend that answers within a few milliseconds, so that the timeout
// ends the wait at every moment around the answer's coming: every client
// gets its own answer or a 504, and a timed-out attempt leaves nothing on
// a connection that goes back to the pool (a deadline in the past would
// fail the next request, which cannot be sent again, with a 502).
func TestAwaitTimeoutStorm(t *testing.T) {
	b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
		if strings.Contains(r.path, "/storm/") {
			time.Sleep(rand.N(6 * time.Millisecond))
		}
		_, err := io.WriteString(c, tokAnswer(r.tok, r.method))
		return err == nil
	})
	timeout := gwv1.Duration("3ms")
	_, addr := awaitRuntime(t, nil, b.addr, &gwv1.HTTPRouteTimeouts{BackendRequest: &timeout})
	var n atomic.Int64
	var timedOut atomic.Int64
	ask := func(what string) {
		tok := tokToken(&n)
		r := askTok(addr, "POST", "/svc/"+what+"/"+tok, "")
		checkOwn(t, what, tok, r)
		switch {
		case r.err == nil && r.status == http.StatusGatewayTimeout:
			timedOut.Add(1)
		case !r.okFor(tok, "POST"):
			t.Errorf("%s: %v, want its own answer or 504", what, r)
		}
		if got := b.received(tok); got > 1 {
			t.Errorf("%s reached the backend %d times", what, got)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				ask("storm")
			}
		})
	}
	wg.Wait()
	t.Logf("%d of 400 timed out", timedOut.Load())
	for range 40 {
		ask("after")
	}
}

// TestAwaitQuickAnswers: a backend that answers the instant it has read a
// request, sometimes in two writes, so that the answer arrives while
// Portico is still between sending the head and waiting: no request may
// wait for an answer that already came (each client has a deadline), and
// each reaches the backend once.
func TestAwaitQuickAnswers(t *testing.T) {
	b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
		a := tokAnswer(r.tok, r.method)
		if r.n%3 == 1 {
			if _, err := io.WriteString(c, a[:10]); err != nil {
				return false
			}
			a = a[10:]
		}
		_, err := io.WriteString(c, a)
		return err == nil
	})
	addr := directPort(t, b.addr)
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 150 {
				method := []string{"GET", "POST", "DELETE"}[(i+j)%3]
				tok := tokToken(&n)
				r := askTok(addr, method, "/svc/quick/"+tok, "")
				checkOwn(t, method, tok, r)
				if !r.okFor(tok, method) {
					t.Errorf("%s: %v, want its own answer", method, r)
					return
				}
				if got := b.received(tok); got != 1 {
					t.Errorf("%s reached the backend %d times", method, got)
				}
			}
		})
	}
	wg.Wait()
}

// awaitMix is a backend behaviour for many clients on few connections,
// chosen per request by the request's index: answer at once or after a
// while, answer and close, answer then send an answer nobody asked for
// (in the same write, so that it is there before the connection is taken
// again), close or reset without answering a request read on a reused
// connection.
func awaitMix() func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
	return func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
		var k int
		fmt.Sscanf(r.path[strings.LastIndexByte(r.path[:len(r.path)-len(r.tok)-1], '/')+1:], "%d", &k)
		a := tokAnswer(r.tok, r.method)
		switch k % 8 {
		case 1:
			time.Sleep(time.Duration(k%5) * time.Millisecond)
		case 2:
			io.WriteString(c, a)
			return false
		case 3:
			io.WriteString(c, a+strayAnswer)
			return true
		case 4:
			io.WriteString(c, a+strayAnswer)
			return false
		case 5:
			if r.n > 0 {
				return false
			}
		case 6:
			if r.n > 0 {
				resetConn(c)
				return false
			}
		}
		_, err := io.WriteString(c, a)
		return err == nil
	}
}

// awaitMany sends clients x requests through ask (which sends one request
// and reads its answer) against the awaitMix backend: every answer must
// be the request's own, or a 502 for a request that cannot be sent again
// and whose connection the backend dropped after reading it, or closed
// after the previous answer before reading it; no request
// reaches the backend twice unless it may be sent again and its
// connection was dropped (then as many times as it was sent on a reused
// connection that the backend drops, as http.Transport does).
func awaitMany(t *testing.T, clients, requests int, ask func(addr, method, path, extra string) tokReply) {
	b := newTokBackend(t, awaitMix())
	addr := directPort(t, b.addr)
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for j := range requests {
				m := awaitMethods[(i*3+j)%len(awaitMethods)]
				k := i*requests + j
				tok := tokToken(&n)
				r := ask(addr, m.method, fmt.Sprintf("/svc/%d/%s", k, tok), m.extra)
				what := fmt.Sprintf("%v (behaviour %d)", m, k%8)
				checkOwn(t, what, tok, r)
				got := b.received(tok)
				dropped := k%8 == 5 || k%8 == 6
				switch {
				case r.err != nil:
					t.Errorf("%s: %v", what, r)
				case r.status == http.StatusBadGateway && !m.replayable && (got == 0 || dropped && got == 1):
					// got == 0: sent on a connection whose close, after the
					// previous answer, was on its way.
				case !r.okFor(tok, m.method):
					t.Errorf("%s: %v, reached the backend %d times", what, r, got)
				case got > 1 && !(dropped && m.replayable):
					t.Errorf("%s reached the backend %d times", what, got)
				}
			}
		})
	}
	wg.Wait()
}

// TestAwaitManyClients: many HTTP/1.1 clients at once on the pooled
// connections of one backend that misbehaves in every way of awaitMix.
// Run with -race.
func TestAwaitManyClients(t *testing.T) {
	awaitMany(t, 24, 30, askTok)
}

// TestAwaitManyClientsH2: the same from HTTP/2 clients, many streams at
// once on each of a few client connections.
func TestAwaitManyClientsH2(t *testing.T) {
	clients := make([]*http.Client, 3)
	for i := range clients {
		clients[i] = h2cClient()
		t.Cleanup(clients[i].CloseIdleConnections)
	}
	var next atomic.Int64
	awaitMany(t, 24, 30, func(addr, method, path, extra string) tokReply {
		c := clients[next.Add(1)%int64(len(clients))]
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		req.Host = "app.example.com"
		if k, v, ok := strings.Cut(strings.TrimSuffix(extra, "\r\n"), ": "); ok {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return tokReply{err: fmt.Errorf("%s %s: %w", method, path, err)}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return tokReply{err: fmt.Errorf("%s %s: body: %w", method, path, err)}
		}
		return tokReply{status: resp.StatusCode, tok: resp.Header.Get("X-Tok"), body: string(b)}
	})
}

// TestAwaitGreetingBackend: a backend that speaks first on every new
// connection, before any request. A greeting that is no HTTP answer (a
// mail server's banner) fails the request with a 502, without a wait. One
// shaped as an HTTP answer is refused the same way when it is there
// before the request goes out, and may be taken for the answer of the
// first request on that connection when it arrives after (the greeting is
// written as the connection is accepted: no proxy can tell it from an
// answer then). Either way, the connection's real answer, which follows,
// reaches no other client.
func TestAwaitGreetingBackend(t *testing.T) {
	for _, greeting := range []string{
		"220 mail.example.com ESMTP ready\r\n",
		"HTTP/1.1 200 OK\r\nX-Tok: GREET\r\nContent-Length: 5\r\n\r\nGREET",
	} {
		name := "banner"
		if strings.HasPrefix(greeting, "HTTP") {
			name = "HTTP answer"
		}
		t.Run(name, func(t *testing.T) {
			b := &tokBackend{seen: map[string]int{}}
			serve := b.serve(func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
				_, err := io.WriteString(c, tokAnswer(r.tok, r.method))
				return err == nil
			})
			b.addr, b.accepted = scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				io.WriteString(c, greeting)
				serve(c, br)
			})
			addr := directPort(t, b.addr)
			var n atomic.Int64
			greeted, refused := 0, 0
			for i := range 12 {
				m := awaitMethods[i%len(awaitMethods)]
				tok := tokToken(&n)
				r := askTok(addr, m.method, "/svc/greet/"+tok, m.extra)
				checkOwn(t, m.String(), tok, r)
				switch {
				case r.err != nil:
					t.Errorf("%v: %v", m, r)
				case r.status == http.StatusBadGateway:
					refused++
				case r.tok == "GREET" && strings.HasPrefix(greeting, "HTTP"):
					greeted++
				case !r.okFor(tok, m.method):
					t.Errorf("%v: %v", m, r)
				}
				if got := b.received(tok); got > 1 {
					t.Errorf("%v reached the backend %d times", m, got)
				}
				time.Sleep(20 * time.Millisecond) // the real answer follows the greeting meanwhile
			}
			t.Logf("%d greetings taken for answers, %d refused, %d connections", greeted, refused, b.accepted())
			if !strings.HasPrefix(greeting, "HTTP") && refused != 12 {
				t.Errorf("%d of 12 requests refused after a banner, want all", refused)
			}
		})
	}
}

// TestAwaitIdleCloseStorm: a backend that closes or resets its idle
// connections a moment after answering, at random, while many clients
// take them from the pool: the close reaches Portico before the
// connection is taken, between the check and the write, during the write
// or while the answer is awaited. A request that may be sent again is
// always answered, with its own answer; one that may not is answered or
// refused (502), and never reaches the backend twice.
func TestAwaitIdleCloseStorm(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "close"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			b := newTokBackend(t, func(c net.Conn, _ *bufio.Reader, r *tokRequest) bool {
				if _, err := io.WriteString(c, tokAnswer(r.tok, r.method)); err != nil {
					return false
				}
				if rand.N(2) == 0 {
					return true
				}
				time.Sleep(rand.N(3 * time.Millisecond))
				if reset {
					resetConn(c)
				}
				return false
			})
			addr := directPort(t, b.addr)
			var n atomic.Int64
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Go(func() {
					for j := range 60 {
						m := awaitMethods[(i+j)%len(awaitMethods)]
						tok := tokToken(&n)
						r := askTok(addr, m.method, "/svc/storm/"+tok, m.extra)
						checkOwn(t, m.String(), tok, r)
						got := b.received(tok)
						switch {
						case r.okFor(tok, m.method) && (got == 1 || m.replayable):
						case r.err == nil && r.status == http.StatusBadGateway && !m.replayable && got <= 1:
						default:
							t.Errorf("%v: %v, reached the backend %d times", m, r, got)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestAwaitEarlyAnswerToStalledHead: on a reused connection, a backend
// answers as soon as it has a request line (a server may answer before it
// has read the whole request), then reads nothing for a while, so
// that the answer is there while most of a head larger than the sockets
// hold is still to go out. Bytes found on the connection once part of the
// head went out are that request's answer, not a stale connection's: the
// request must not be sent again (a POST is not replayable), and its
// client gets that answer.
func TestAwaitEarlyAnswerToStalledHead(t *testing.T) {
	b := newLineFirstTokBackend(t, func(c net.Conn, br *bufio.Reader, r *tokRequest) bool {
		io.WriteString(c, tokAnswer(r.tok, r.method))
		if strings.Contains(r.path, "/early/") {
			time.Sleep(300 * time.Millisecond)
		}
		_, err := readHead(br)
		return err == nil
	})
	askBigOnWarmConnection(t, b, "/svc/early/")
}
