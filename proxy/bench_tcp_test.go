package proxy

import (
	"fmt"
	"io"
	"net"
	"testing"

	"go.uber.org/zap"
)

// startTCPBench is a runtime serving one TCP port whose route goes to
// backend, for benchmarks: no logger, no observer.
func startTCPBench(b *testing.B, backend string) string {
	b.Helper()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	rt := New(opts, zap.NewNop())
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	port := freePort(b)
	if err := rt.Apply(tcpConfig(port, "ns/bench", tcpBackend{"a", 1, []string{backend}})); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// benchEcho echoes each connection's bytes back until the client's EOF.
func benchEcho(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkTCPConnection is one connection through a TCP listener per
// op: connect, one byte there and back, close.
func BenchmarkTCPConnection(b *testing.B) {
	addr := startTCPBench(b, benchEcho(b))
	one := []byte{'x'}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkTCPThroughput is 64 KiB each way through one connection per
// op: the client writes while it reads the echo back.
func BenchmarkTCPThroughput(b *testing.B) {
	addr := startTCPBench(b, benchEcho(b))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const chunk = 64 << 10
	out, in := make([]byte, chunk), make([]byte, chunk)
	b.SetBytes(chunk)
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	n := b.N
	go func() {
		for range n {
			if _, err := io.ReadFull(c, in); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range n {
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
