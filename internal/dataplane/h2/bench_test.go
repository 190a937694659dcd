package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func trivialHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello")
	})
}

// BenchmarkStreams runs batches of 100 streams on one connection from a
// raw framer client, so that the figure is mostly the server's.
func BenchmarkStreams(b *testing.B) {
	ts := startServer(b, &Server{Handler: trivialHandler()}, false)
	benchStreams(b, ts.addr)
}

// BenchmarkStreamsX is BenchmarkStreams against x/net's server, to
// compare.
func BenchmarkStreamsX(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	srv := &http2.Server{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: trivialHandler()})
		}
	}()
	benchStreams(b, ln.Addr().String())
}

func benchStreams(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fr := http2.NewFramer(c, c)
	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings()
	fr.WriteWindowUpdate(0, 1<<30)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// The fields are indexed from the second block on: that one is
	// sent for every stream.
	hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := bytes.Clone(hbuf.Bytes())
	ended := make(chan struct{}, 128)
	go func() {
		rfr := http2.NewFramer(io.Discard, c)
		for {
			f, err := rfr.ReadFrame()
			if err != nil {
				close(ended)
				return
			}
			if f.Header().Flags.Has(http2.FlagDataEndStream) && (f.Header().Type == http2.FrameData || f.Header().Type == http2.FrameHeaders) {
				ended <- struct{}{}
			}
		}
	}()
	fr.WriteSettingsAck()
	// The first block, which adds the fields to the table.
	first := true
	id := uint32(1)
	const batch = 100
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for range n {
			frag := block
			if first {
				frag, first = firstBlock(), false
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndHeaders: true, EndStream: true})
			id += 2
		}
		for range n {
			if _, ok := <-ended; !ok {
				b.Fatal("connection closed")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// firstBlock is the header block that first adds the fields to a fresh
// decoder's table, matching what the benchmark's encoder indexed.
func firstBlock() []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return buf.Bytes()
}

// BenchmarkClientParallel drives the server with x/net's client, many
// streams at once on one connection.
func BenchmarkClientParallel(b *testing.B) {
	ts := startServer(b, &Server{Handler: trivialHandler()}, false)
	cl := ts.client(b)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequestWithContext(context.Background(), "GET", ts.url()+"/", nil)
			res, err := cl.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
