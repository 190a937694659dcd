package proxy

import (
	"net"
	"testing"
	"time"
)

// BenchmarkHeadDeadline is what the wait for an answer's head costs a
// request on a pooled connection in deadlines: set before the request and
// lifted after the head, as the direct path did, against armHead, which
// leaves it on the connection and sets it again only once it drifted by
// more than headSlack.
func BenchmarkHeadDeadline(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			var buf [1]byte
			_, _ = c.Read(buf[:]) // until the benchmark closes its end
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	const timeout = 60 * time.Second
	b.Run("set and lift", func(b *testing.B) {
		for b.Loop() {
			_ = conn.SetReadDeadline(time.Now().Add(timeout))
			_ = conn.SetReadDeadline(time.Time{})
		}
	})
	b.Run("armHead", func(b *testing.B) {
		c := &h1Conn{conn: conn}
		for b.Loop() {
			c.armHead(time.Now(), timeout)
		}
		c.liftHeadDeadline()
	})
}
