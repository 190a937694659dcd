package h2

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// countingConn counts the writes the server makes to its socket.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestSmallAnswerOneWrite: the HEADERS and the DATA of a small answer go
// out in one write to the socket, so over TLS in one record and one system
// call; sending them apart doubled both for every answer with a body.
func TestSmallAnswerOneWrite(t *testing.T) {
	var writes atomic.Int64
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		srv.ServeConn(context.Background(), countingConn{c, &writes})
	}()
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
		<-done
	})
	ts := &testServer{srv: srv, ln: ln, addr: ln.Addr().String()}
	hc := ts.client(t)
	get := func() {
		t.Helper()
		resp, err := hc.Get(ts.url() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "hello" {
			t.Fatalf("body %q, %v", b, err)
		}
	}
	get() // the connection's SETTINGS and their ACK
	before := writes.Load()
	const n = 20
	for range n {
		get()
	}
	if got := writes.Load() - before; got > n {
		t.Errorf("%d answers took %d writes to the socket, want at most one each", n, got)
	}
}
