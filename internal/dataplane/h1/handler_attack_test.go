package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestStalledBodyLeftUnread: a body the handler left unread is drained
// after the answer so the connection can be kept; a client that stops
// sending it part way must not hold the connection (and its goroutine)
// forever. The drain is bounded like a head, by ReadHeaderTimeout. OPTIONS
// * is answered without a handler, which leaves its body to the drain too.
func TestStalledBodyLeftUnread(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}, func(s *Server) { s.ReadHeaderTimeout = 300 * time.Millisecond })
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n0123456789",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n0123456789",
	} {
		c := dial(t, addr)
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.20q: %v", raw, err)
		}
		resp.Body.Close()
		if !closed(c, 3*time.Second) {
			t.Errorf("%.20q: connection still open 3s after the rest of the body stalled", raw)
		}
	}
}

// TestContinueWhileAnswering: a body read on another goroutine than the
// handler's (a transport sending it upstream) sends the 100 (Continue)
// while the handler may be writing its answer: the two must never write
// the connection at once, and the client must read a clean stream, 100 or
// not, then the answer. Run with -race.
func TestContinueWhileAnswering(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(io.Discard, r.Body)
		}()
		w.Header().Set("X-Answer", "1")
		w.WriteHeader(http.StatusAccepted)
		_ = http.NewResponseController(w).Flush()
		<-done
	}, nil)
	// One connection each: one answered before its 100 (Continue) went
	// closes, the body having maybe not been sent.
	for i := range 200 {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc")
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode == http.StatusContinue {
				continue
			}
			if resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Answer") != "1" {
				t.Fatalf("request %d: answer %d %v", i, resp.StatusCode, resp.Header)
			}
			break
		}
		c.Close()
	}
}

// TestNoInformationalToHTTP10: an HTTP/1.0 client cannot take a 1xx answer
// (RFC 9110, section 15.2: a server must not send one): it would read it
// as the final answer and what follows as its body. A handler's 1xx (the
// proxy passes on a backend's 100 or 103) is dropped for it.
func TestNoInformationalToHTTP10(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</s.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusContinue)
		w.Header().Del("Link")
		io.WriteString(w, "final")
	}, nil)
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		raw := "POST / " + proto + "\r\nHost: a\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"
		resps, bodies := answers(t, addr, raw, http.MethodPost)
		var got []int
		for _, r := range resps {
			got = append(got, r.StatusCode)
		}
		want := "[103 100 200]"
		if proto == "HTTP/1.0" {
			want = "[200]"
		}
		if fmt.Sprint(got) != want || bodies[len(bodies)-1] != "final" {
			t.Errorf("%s: answers %v %q, want %s", proto, got, bodies, want)
		}
	}
}

// TestHijackWhileWatching: the watch for a client going away may start its
// read while a handler hijacks the connection; it must then not read the
// handed-over connection (it would take the upgraded protocol's bytes and
// fail the hijacker's reads). The watch is made to start at once, racing
// each hijack. Run with -race.
func TestHijackWhileWatching(t *testing.T) {
	var n atomic.Int64
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		// Hijacks spread around the moment the watch starts.
		time.Sleep(time.Duration(n.Add(1)%100) * time.Microsecond)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(brw, buf); err != nil {
			t.Errorf("reading the upgraded connection: %v", err)
			return
		}
		c.Write(buf)
	}, func(s *Server) { s.CloseDetectDelay = 50 * time.Microsecond })
	for i := range 300 {
		c := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade %d: %v %v", i, resp, err)
		}
		io.WriteString(c, "hello")
		buf := make([]byte, 5)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("echo %d: %q, %v", i, buf, err)
		}
		c.Close()
	}
}

// TestBodyAfterPanic: a handler that panics (ReverseProxy aborts with
// http.ErrAbortHandler when a backend fails mid-answer) may leave a
// goroutine still reading its body (the transport sending it upstream).
// Its connection is closed and pooled: a later read must fail, not read
// from the reader the pooled connection now serves another client with
// (its request's bytes would go to the first client's backend), nor panic
// on a reader left without a source.
func TestBodyAfterPanic(t *testing.T) {
	late := make(chan string, 1)
	next := make(chan struct{})
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			io.ReadFull(r.Body, make([]byte, 3))
			go func() {
				defer func() {
					if v := recover(); v != nil {
						late <- fmt.Sprint("panic: ", v)
					}
				}()
				<-next
				b := make([]byte, 64)
				n, err := r.Body.Read(b)
				if n == 0 && err != nil {
					late <- "failed"
				} else {
					late <- fmt.Sprintf("%q %v", b[:n], err)
				}
			}()
			panic(http.ErrAbortHandler)
		}
		close(next)
		got := <-late
		if got != "failed" {
			t.Errorf("a read of the aborted request's body got %s", got)
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}, nil)
	c := dial(t, addr)
	io.WriteString(c, "POST /panic HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc")
	if !closed(c, 2*time.Second) {
		t.Fatal("connection of the aborted request still open")
	}
	// Most likely served by the pooled connection of the first.
	c2 := dial(t, addr)
	io.WriteString(c2, "POST /other HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	io.WriteString(c2, "SECRET")
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "SECRET" {
		t.Errorf("the second client's handler read %q of its body", b)
	}
}

// TestOptionsFloodUnread: OPTIONS * is answered by the server itself,
// with no handler to set a write deadline: a client that pipelines many
// and never reads the answers must not hold the connection forever once
// the answers fill the socket's buffers. The write is bounded like a
// head, by ReadHeaderTimeout.
func TestOptionsFloodUnread(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Small buffers: the answers fill them sooner.
			_ = c.(*net.TCPConn).SetWriteBuffer(4096)
			go s.ServeConn(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.Close()
	})
	c := dial(t, ln.Addr().String())
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	const n = 30000
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		// The server stops reading once its writes block: whatever is
		// not taken is dropped with the connection.
		io.WriteString(c, strings.Repeat("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", n))
	}()
	time.Sleep(2 * time.Second)
	br := bufio.NewReader(c)
	got := 0
	for ; got < n; got++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		resp.Body.Close()
	}
	if got == n {
		t.Errorf("all %d answers were sent to a client that read none for 2s", n)
	}
}

// TestForbiddenTrailersDropped: fields that frame or route a message, or
// control its connection, never travel in a trailer section, either way.
// A recipient that merged a trailing Content-Length or Host into the
// header section would act on a message other than the one framed.
func TestForbiddenTrailersDropped(t *testing.T) {
	var got atomic.Pointer[http.Header]
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			_, _ = io.Copy(io.Discard, r.Body)
			tr := r.Trailer.Clone()
			got.Store(&tr)
			return
		}
		w.Header().Set("Trailer", "Content-Length, X-Ok, Content-Type")
		_, _ = io.WriteString(w, "data")
		_ = http.NewResponseController(w).Flush()
		w.Header().Set("Content-Length", "99")
		w.Header().Set("Content-Type", "text/late")
		w.Header().Set("X-Ok", "ok")
		w.Header().Set(http.TrailerPrefix+"Transfer-Encoding", "chunked")
		w.Header().Set(http.TrailerPrefix+"host", "elsewhere")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}, nil)

	raw := closingGet(t, addr)
	_, tail, ok := strings.Cut(string(raw), "\r\n0\r\n")
	if !ok {
		t.Fatalf("no last chunk in %q", raw)
	}
	for _, bad := range []string{"Content-Length", "Content-Type", "Transfer-Encoding", "Host"} {
		if strings.Contains(tail, bad+":") {
			t.Errorf("trailer section %q carries %s", tail, bad)
		}
	}
	if !strings.Contains(tail, "X-Ok: ok\r\n") || !strings.Contains(tail, "X-Late: late\r\n") {
		t.Errorf("trailer section %q lost the allowed fields", tail)
	}

	c := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"3\r\nabc\r\n0\r\nContent-Length: 3\r\nHost: elsewhere\r\nX-T: v\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr := got.Load()
	if tr == nil {
		t.Fatal("the handler never read the body")
	}
	if tr.Get("X-T") != "v" || len(*tr) != 1 {
		t.Errorf("request trailers %v, want only X-T", *tr)
	}
}

// TestWriteFailureCancelsRequest: once a write to the client failed (a
// deadline passed, the client reset), the request's context is cancelled,
// as net/http's server cancels it. A handler that learns of no error from
// what it writes, a 1xx head (WriteHeader returns nothing), would
// otherwise go on, and with it the backend request it relays, for as long
// as the backend sends heads.
func TestWriteFailureCancelsRequest(t *testing.T) {
	done := make(chan error, 1)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		w.Header().Set("Link", "</"+strings.Repeat("x", 16<<10)+">; rel=preload")
		for start := time.Now(); r.Context().Err() == nil && time.Since(start) < 5*time.Second; {
			w.WriteHeader(http.StatusEarlyHints)
		}
		done <- context.Cause(r.Context())
	}, nil)
	c := dial(t, addr)
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the request's context is still live 5s after writes to its client began failing")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("cause %v, want the write's timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler still running after 10s")
	}
}

// TestInformationalCarriesNoFraming: a 1xx head has no content, so it
// carries no Content-Length or Transfer-Encoding, whatever the header map
// holds when it is sent (a proxy copies a backend's 1xx fields into it).
// A lenient recipient in front (a load balancer reusing its connection
// for other clients) that framed a body by one would take the start of
// the real answer for it, and read the rest as the next answer. net/http
// and x/net leave both out too.
func TestInformationalCarriesNoFraming(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Transfer-Encoding", "chunked")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Del("Content-Length")
		w.Header().Del("Transfer-Encoding")
		io.WriteString(w, "done")
	}, nil)
	raw := closingGet(t, addr)
	info, final, ok := strings.Cut(string(raw), "\r\n\r\n")
	if !ok || !strings.HasPrefix(info, "HTTP/1.1 103 ") || !strings.Contains(info, "Link: </a.css>") {
		t.Fatalf("no 103 head first in %q", raw)
	}
	for _, bad := range []string{"Content-Length", "Transfer-Encoding"} {
		if strings.Contains(info, bad+":") {
			t.Errorf("103 head %q carries %s", info, bad)
		}
	}
	if !strings.HasPrefix(final, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(final, "\r\n\r\ndone") {
		t.Errorf("final answer %q", final)
	}
}

// closingGet sends a GET that closes its connection and returns all that
// comes back, raw.
func closingGet(t *testing.T, addr string) []byte {
	t.Helper()
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	raw, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
