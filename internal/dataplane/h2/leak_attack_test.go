package h2

// Attacks on what the HTTP/2 server hands out and must take back: flow
// control windows, buffers and goroutines, through resets, connection ends
// and shutdown (the hostile client is streams_attack_test.go's). Tests
// named for a defect fail against the code they were written for; the
// others hold a defence that was tried.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestResetLeaksConnSendWindow: the send window a frame took must
// come back when the frame is not sent.
//
// Attack: stream 5 streams a body to a client that does not read, so its
// writer blocks on the socket holding the write lock. Stream 3's handler
// then writes: writeData takes its bytes out of the stream's and the
// connection's send windows and waits for the write lock. The client
// resets stream 3 (CANCEL, as any client does when a user navigates away)
// and reads on.
//
// Now: once stream 3's writer gets the write lock it sees the stream dead
// and returns, the bytes it took from the connection window neither sent
// nor given back (writeData, and sendHead after reserve, return on
// st.dead without giveBack). The server's connection window is now lower
// than the client's count: each such race loses up to a frame of it, and
// once it reaches zero every stream of the connection stalls for ever (the
// client has received nothing to give credit for).
//
// Should: a frame that is not written gives its window back (giveBack on
// the st.dead paths of writeData and sendHead; or take the window under
// the write lock) — response.go writeData, sendHead.
func TestResetLeaksConnSendWindow(t *testing.T) {
	// writeData: the head went out, the body's frame waits for the lock.
	t.Run("writeData", func(t *testing.T) { testResetLeaksConnSendWindow(t, true, 10000) })
	// sendHead: a small answer's body reserved with its HEADERS.
	t.Run("sendHead", func(t *testing.T) { testResetLeaksConnSendWindow(t, false, 3000) })
}

func testResetLeaksConnSendWindow(t *testing.T, headFirst bool, lost int) {
	headSent := make(chan struct{})
	goWrite := make(chan struct{})
	wrote := make(chan error, 1)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/victim":
			if headFirst {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
			}
			close(headSent)
			<-goWrite
			_, err := w.Write(make([]byte, lost))
			wrote <- err
		default:
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			_, _ = w.Write(make([]byte, n))
		}
	})}
	addr := startTightServer(t, srv)
	rc := dialHostile(t, addr, false, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	_ = rc.nc.(interface{ SetReadBuffer(int) error }).SetReadBuffer(4096)

	rc.do(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<20) })
	rc.get(3, "/victim", true)
	select {
	case <-headSent:
	case <-time.After(5 * time.Second):
		t.Fatal("stream 3's head was not sent")
	}
	// Stream 5 fills the sockets and blocks its writer, under the write
	// lock; it stays within the connection window with room for stream 3.
	const big = 600000
	rc.get(5, fmt.Sprintf("/stream?n=%d", big), true)
	waitWriters(t, srv, 1) // stream 5's writer, blocked on the socket
	close(goWrite)
	waitWriters(t, srv, 2) // and stream 3's, its window taken, waiting
	rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(3, http2.ErrCodeCancel) })
	time.Sleep(100 * time.Millisecond)
	_ = rc.nc.(interface{ SetReadBuffer(int) error }).SetReadBuffer(1 << 20)
	go rc.readLoop()
	select {
	case err := <-wrote: // a held small answer returns at once
		if err == nil && headFirst {
			t.Log("stream 3's write went out before the reset: the race was not hit")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream 3's write did not return")
	}
	got := 0
	for done := false; !done; {
		f, ok := rc.wait(5*time.Second, func(f seenFrame) bool { return f.typ == http2.FrameData })
		if !ok {
			t.Fatalf("stream 5 stalled after %d bytes", got)
		}
		got += f.n
		done = f.stream == 5 && f.flags.Has(http2.FlagDataEndStream)
	}
	// The client gave no more connection credit: the server may send what
	// is left of the 65535+1<<20 bytes, and must.
	left := 65535 + 1<<20 - got
	rc.get(7, fmt.Sprintf("/stream?n=%d", left), true)
	n := 0
	for {
		f, ok := rc.wait(3*time.Second, func(f seenFrame) bool { return f.typ == http2.FrameData && f.stream == 7 })
		if !ok {
			t.Fatalf("the connection window lost bytes: stream 7 got %d of the %d bytes the client's window allows, then stalled", n, left)
		}
		n += f.n
		if f.flags.Has(http2.FlagDataEndStream) {
			break
		}
	}
	if n != left {
		t.Fatalf("stream 7 got %d bytes, want %d", n, left)
	}
}

// TestConnectionEndsLeakNothing holds: connections that end in
// every way a client can end them (closing mid-body, mid-response, after
// a bad preface, after its own GOAWAY, after resetting its streams, while
// a handler waits on the request's context) leave no goroutine and no
// connection behind.
func TestConnectionEndsLeakNothing(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/read":
			_, _ = io.Copy(io.Discard, r.Body)
		case "/write":
			b := make([]byte, 16<<10)
			for {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
		case "/ctx":
			<-r.Context().Done()
		}
	})}
	addr := startTightServer(t, srv)
	time.Sleep(50 * time.Millisecond)
	base, _ := busyGoroutines()
	ends := []func(rc *hostileConn){
		func(rc *hostileConn) { // closes mid-body
			rc.get(1, "/read", false)
			rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, false, make([]byte, 1000)) })
		},
		func(rc *hostileConn) { rc.get(1, "/write", true) }, // never reads the answer
		func(rc *hostileConn) { rc.get(1, "/ctx", true) },
		func(rc *hostileConn) { // resets its streams, then leaves
			rc.get(1, "/ctx", true)
			rc.get(3, "/read", false)
			rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) })
			rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(3, http2.ErrCodeCancel) })
		},
		func(rc *hostileConn) { // says goodbye first
			rc.get(1, "/ctx", true)
			rc.do(func(fr *http2.Framer) error { return fr.WriteGoAway(1, http2.ErrCodeNo, nil) })
		},
		func(rc *hostileConn) { // breaks the protocol
			rc.get(1, "/read", false)
			rc.do(func(fr *http2.Framer) error { return fr.WriteData(2, false, []byte("x")) })
		},
	}
	for i := range 5 {
		for _, end := range ends {
			rc := dialHostile(t, addr, i%2 == 0)
			end(rc)
			time.Sleep(20 * time.Millisecond)
			rc.nc.Close()
		}
		// A preface that is not one.
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		nc.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, dump := busyGoroutines()
		open := srv.openConns()
		if n <= base+2 && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines (%d before), %d connections open after every client left:\n%s", n, base, open, dump)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// busyGoroutines counts the goroutines but the idle workers of the
// servers' pools (kept on purpose, up to workers.DefaultMaxIdle), and
// returns the dump of the others.
func busyGoroutines() (int, string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var busy []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) > 1 && strings.Contains(lines[0], "[chan receive") && strings.Contains(lines[1], "workers.(*worker).run") {
			continue
		}
		busy = append(busy, g)
	}
	return len(busy), strings.Join(busy, "\n\n")
}

// TestShutdownRacingCloseLeaksNothing holds: Shutdown's GOAWAY
// goroutines racing connections that close by themselves and a Close
// called meanwhile leave no goroutine, no connection, no data race.
func TestShutdownRacingCloseLeaksNothing(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/write" {
			b := make([]byte, 16<<10)
			for {
				if _, err := w.Write(b); err != nil {
					return
				}
			}
		}
		<-r.Context().Done()
	})}
	addr := startTightServer(t, srv)
	time.Sleep(50 * time.Millisecond)
	base, _ := busyGoroutines()
	var conns []*hostileConn
	for i := range 20 {
		rc := dialHostile(t, addr, i%3 != 0) // a third never read
		path := "/ctx"
		if i%2 == 0 {
			path = "/write"
		}
		rc.get(1, path, true)
		conns = append(conns, rc)
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	for i, rc := range conns {
		if i%4 == 1 {
			rc.nc.Close()
		}
	}
	time.Sleep(20 * time.Millisecond)
	_ = srv.Close()
	<-done
	_ = srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, dump := busyGoroutines()
		open := srv.openConns()
		if n <= base+2 && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines (%d before), %d connections open after Shutdown and Close:\n%s", n, base, open, dump)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBodyBuffersNeverMix holds: request body buffers, taken from
// and given back to the server's pool while other streams read theirs in
// small and large pieces, never show one stream's bytes to another.
func TestBodyBuffersNeverMix(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := r.URL.Query().Get("b")[0]
		small := r.URL.Query().Get("small") != ""
		buf := make([]byte, 40<<10)
		if small {
			buf = buf[:7]
		}
		n := 0
		for {
			k, err := r.Body.Read(buf)
			for _, c := range buf[:k] {
				if c != want {
					http.Error(w, fmt.Sprintf("byte %d is %q, want %q", n, c, want), http.StatusTeapot)
					return
				}
				n++
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if small && n%(4<<10) < 7 {
				time.Sleep(time.Millisecond) // let the buffer fill and slide
			}
		}
		fmt.Fprint(w, n)
	})}
	ts := startServer(t, srv, false)
	c := ts.client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := byte('a' + i)
			size := 100<<10 + i*1000
			q := fmt.Sprintf("?b=%c", b)
			if i%2 == 0 {
				q += "&small=1"
			}
			body := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{b}, size/2)), bytes.NewReader(bytes.Repeat([]byte{b}, size-size/2)))
			resp, err := c.Post(ts.url()+"/"+q, "application/octet-stream", body)
			if err != nil {
				errs <- err
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(got) != strconv.Itoa(size) {
				errs <- fmt.Errorf("upload %c: %d %s", b, resp.StatusCode, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// waitWriters waits until the server's connection has n goroutines in or
// waiting for its write section, the one in it blocked there for 200 ms.
func waitWriters(t *testing.T, srv *Server, n int32) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	var held time.Time
	for time.Now().Before(end) {
		srv.mu.Lock()
		var c *conn
		for c = range srv.conns {
		}
		srv.mu.Unlock()
		switch {
		case c == nil || c.writers.Load() < n || c.wmu.TryLock() && func() bool { c.wmu.Unlock(); return true }():
			held = time.Time{}
		case held.IsZero():
			held = time.Now()
		case time.Since(held) > 200*time.Millisecond:
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the connection never had %d writers waiting", n)
}
