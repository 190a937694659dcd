package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// BenchmarkForwardH2C is BenchmarkForward over one cleartext HTTP/2
// connection with prior knowledge: every request is a stream of the same
// connection, so the cost of Portico's HTTP/2 connection handling shows.
func BenchmarkForwardH2C(b *testing.B) { benchmarkForwardH2C(b, DefaultOptions()) }

func benchmarkForwardH2C(b *testing.B, opts Options) {
	backend := slowBackend(b, "backend")
	rt := New(opts, zap.NewNop())
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	port := freePort(b)
	if err := rt.Apply(httpPortConfig(b, port, "svc", backend)); err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	c := &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	getInParallel(b, c, url)
}

// BenchmarkH2Guard is the guard's own work for one request on a long-lived
// connection: the client's HEADERS read, the server's HEADERS and DATA
// written, then the client's WINDOW_UPDATE read, each passed through its
// direction's scanner as the framer reads and writes them. It isolates
// what BenchmarkForwardH2C, dominated by the sockets, cannot resolve.
func BenchmarkH2Guard(b *testing.B) {
	frames := func(write func(*http2.Framer)) []byte {
		var buf bytes.Buffer
		write(http2.NewFramer(&buf, nil))
		return buf.Bytes()
	}
	const requests = 1024
	var headers, answers, updates [requests][]byte
	for i := range requests {
		id := uint32(2*i + 1)
		headers[i] = frames(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, 20), EndStream: true, EndHeaders: true}) //nolint:errcheck // to a buffer
		})
		answers[i] = frames(func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: make([]byte, 30), EndHeaders: true}) //nolint:errcheck // to a buffer
			fr.WriteData(id, true, make([]byte, 100))                                                                 //nolint:errcheck // to a buffer
		})
		updates[i] = frames(func(fr *http2.Framer) { fr.WriteWindowUpdate(0, 100) }) //nolint:errcheck // to a buffer
	}
	g := newH2Guard(nil, h2Limits{glitches: 200, forgiven: 20, maxStreams: 250}, zap.NewNop()).(*h2Guard)
	g.in.skip = 0
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		i := n % requests
		if i == 0 {
			g.maxID = 0
		}
		g.in.scan(headers[i], g.inbound)
		g.out.scan(answers[i], g.outbound)
		g.in.scan(updates[i], g.inbound)
	}
	if g.tripped.Load() {
		b.Fatal("the guard tripped on well-behaved traffic")
	}
}

// BenchmarkPacer is the pacing of one small response: the pacer started
// with its watchdog timer, a write and a flush accounted, the watch
// stopped. The sockets of BenchmarkForward hide it.
func BenchmarkPacer(b *testing.B) {
	opts := DefaultOptions()
	ps := &portServer{}
	rec := httptest.NewRecorder()
	body := []byte("backend")
	b.ReportAllocs()
	for b.Loop() {
		pw := &pacedWriter{ResponseWriter: rec, ps: ps}
		pw.p = &pw.pacer
		pw.p.start(rec, &opts, time.Now())
		pw.Write(body)
		pw.FlushError()
		pw.p.stop()
	}
}
