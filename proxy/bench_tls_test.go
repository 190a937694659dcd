package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"testing"

	"go.uber.org/zap"
)

// helloFor is a real ClientHello record for serverName, from crypto/tls.
func helloFor(b *testing.B, serverName string) []byte {
	b.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		_ = tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake() //nolint:gosec // only its ClientHello is used
		c.Close()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		b.Fatal(err)
	}
	return append(hdr, body...)
}

// BenchmarkTLSPassthroughConnection is the data plane's cost of one
// passthrough connection: accept, read and route the ClientHello, dial the
// backend, replay, carry one byte each way, close. The backend answers the
// ClientHello's last byte, so no handshake is measured.
func BenchmarkTLSPassthroughConnection(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	hello := helloFor(b, "h7.pass.test")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, len(hello)+1)
				if _, err := io.ReadFull(c, buf); err == nil {
					c.Write(buf[len(buf)-1:])
				}
			}()
		}
	}()
	p := tlsPort{pass: map[string]string{}, endpoints: map[string]string{}}
	for i := range 1000 {
		p.pass[fmt.Sprintf("h%d.pass.test", i)] = fmt.Sprintf("p%d", i)
		p.endpoints[fmt.Sprintf("p%d", i)] = ln.Addr().String()
	}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	rt := New(opts, zap.NewNop())
	defer rt.Close(b.Context())
	port := freePort(b)
	if err := rt.Apply(p.config(port)); err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	msg := append(append([]byte{}, hello...), 'x')
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0)
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err != nil || one[0] != 'x' {
			b.Fatalf("no answer: %v", err)
		}
		c.Close()
	}
}
