package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkForward is one GET through a Portico port to a backend, over
// kept-alive loopback connections on both sides. Allocations count the
// client and the backend too (same process), which stay the same from run
// to run: the changes are Portico's.
func BenchmarkForward(b *testing.B) {
	benchmarkForward(b, DefaultOptions())
}

// BenchmarkForwardAccessLog is BenchmarkForward with the access log on,
// JSON lines into a discarding writer.
func BenchmarkForwardAccessLog(b *testing.B) {
	opts := DefaultOptions()
	opts.AccessLog = discardAccessLog()
	benchmarkForward(b, opts)
}

// BenchmarkForwardRequestID is BenchmarkForward with request IDs on.
func BenchmarkForwardRequestID(b *testing.B) {
	opts := DefaultOptions()
	opts.RequestID = true
	benchmarkForward(b, opts)
}

func benchmarkForward(b *testing.B, opts Options) {
	backend := slowBackend(b, "backend")
	rt := New(opts, zap.NewNop())
	b.Cleanup(func() { _ = rt.Close(b.Context()) })
	port := freePort(b)
	if err := rt.Apply(httpPortConfig(b, port, "svc", backend)); err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	getInParallel(b, c, url)
}

// getInParallel GETs url with c from every benchmark goroutine until the
// benchmark ends, failing on any answer but 200.
func getInParallel(b *testing.B, c *http.Client, url string) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
