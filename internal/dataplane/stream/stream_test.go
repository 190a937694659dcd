package stream

import (
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// pipeline is client <-> [clientSide | Pipe | backendSide] <-> backend.
func pipeline(t *testing.T, idle time.Duration) (client, backend net.Conn, done chan Result) {
	client, clientSide := tcpPair(t)
	backendSide, backend := tcpPair(t)
	done = make(chan Result, 1)
	go func() { done <- Pipe(clientSide, backendSide, idle) }()
	return client, backend, done
}

// TestHalfClose: the client's end of writes reaches the backend, whose
// answer still comes back; byte counts are each direction's.
func TestHalfClose(t *testing.T) {
	client, backend, done := pipeline(t, 0)
	go func() {
		got, _ := io.ReadAll(backend)
		backend.Write(append([]byte("seen:"), got...))
		backend.Close()
	}()
	client.Write([]byte("hello"))
	client.(*net.TCPConn).CloseWrite()
	got, _ := io.ReadAll(client)
	if string(got) != "seen:hello" {
		t.Fatalf("got %q", got)
	}
	r := <-done
	if r.Up != 5 || r.Down != 10 || r.Idle {
		t.Fatalf("result %+v, want 5 up, 10 down, not idle", r)
	}
}

// TestIdleCut: a stream where nothing moves is closed once idle passes.
func TestIdleCut(t *testing.T) {
	client, _, done := pipeline(t, 200*time.Millisecond)
	client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a silent backend")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("idle stream not closed")
	}
	if r := <-done; !r.Idle {
		t.Fatalf("result %+v, want idle", r)
	}
}

// TestIdleKeepsMovingStreams: a stream that moves a byte more often than
// idle lives on past it, although the bytes go through splice(2), where no
// read of Portico's counts them.
func TestIdleKeepsMovingStreams(t *testing.T) {
	client, backend, done := pipeline(t, 300*time.Millisecond)
	go func() { io.Copy(io.Discard, backend); backend.Close() }()
	for range 15 {
		if _, err := client.Write([]byte{'x'}); err != nil {
			t.Fatalf("stream cut while moving: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("stream ended while moving: %+v", r)
	default:
	}
	client.Close()
	if r := <-done; r.Up != 15 || r.Idle {
		t.Fatalf("result %+v, want 15 up, not idle", r)
	}
}
