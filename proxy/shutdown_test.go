package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestReliabilityShutdownWithinDrain: Close returns within its deadline,
// --drain-timeout, whatever is still open then: a request whose backend
// never answers, a WebSocket, an idle cleartext HTTP/2 connection, and
// connections to the HTTPS port that never finish their ClientHello.
// Shutdown took 11.85s with a 10s drain: a fixed wait came after the
// deadline, and a connection still sending its ClientHello was waited for
// but never closed.
func TestReliabilityShutdownWithinDrain(t *testing.T) {
	rt := relRuntime(t, func(o *Options) { o.BackendResponseTimeout = -1 })
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			_, _ = io.Copy(io.Discard, c)
			return
		}
		<-r.Context().Done()
	})
	addr := relHTTPPort(t, rt, backend)
	tlsRT := relRuntime(t, nil)
	tlsAddr, _ := relHTTPSPort(t, tlsRT, backend)
	io.WriteString(relDial(t, addr), "GET /hang HTTP/1.1\r\nHost: a\r\n\r\n")
	io.WriteString(relDial(t, addr), "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	newH2Client(t, relDial(t, addr), "http")
	relDial(t, tlsAddr)
	io.WriteString(relDial(t, tlsAddr), "\x16\x03\x01\x02\x00") // a record header, and nothing of the hello
	time.Sleep(300 * time.Millisecond)

	const drain = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for name, rt := range map[string]*Runtime{"HTTP port": rt, "HTTPS port": tlsRT} {
		wg.Go(func() {
			_ = rt.Close(ctx)
			if took := time.Since(start); took > drain+50*time.Millisecond {
				t.Errorf("%s: Close took %v with a %v drain", name, took.Round(time.Millisecond), drain)
			}
		})
	}
	wg.Wait()
}
