package proxy

import (
	"net"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkUDPExchange is one datagram of 64 bytes there and back through
// a UDP listener per op, in one session.
func BenchmarkUDPExchange(b *testing.B) {
	echo := udpBackend(b, echoUDP)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	rt := New(opts, zap.NewNop())
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	port := freeUDPPort(b)
	if err := rt.Apply(udpConfig(port, "ns/bench", tcpBackend{"a", 1, []string{echo}})); err != nil {
		b.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	out, in := make([]byte, 64), make([]byte, 128)
	b.SetBytes(2 * 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(in); err != nil {
			b.Fatal(err)
		}
	}
}
