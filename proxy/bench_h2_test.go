package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// BenchmarkForwardH2C is BenchmarkForward over one cleartext HTTP/2
// connection with prior knowledge: every request is a stream of the same
// connection, so the cost of Portico's HTTP/2 connection handling shows.
func BenchmarkForwardH2C(b *testing.B) {
	backend := slowBackend(b, "backend")
	rt := New(DefaultOptions(), zap.NewNop())
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
