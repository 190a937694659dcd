package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2GuardSparesWellBehavedClients: what ordinary HTTP/2 clients do
// (large downloads and uploads with their WINDOW_UPDATEs, streams cancelled
// after their response started, a few PINGs) stays far below a limit set
// ten times lower than the default, on one connection throughout, over
// cleartext and TLS.
func TestH2GuardSparesWellBehavedClients(t *testing.T) {
	strict := func(o *Options) { o.H2MaxGlitches = 20; o.H2GlitchesForgiven = 1 }
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("X-Proto", r.Header.Get("X-Forwarded-Proto"))
		w.Write(bytes.Repeat([]byte("x"), size))
	})
	httpAddr := relHTTPPort(t, relRuntime(t, strict), backend)
	httpsAddr, tlsCfg := relHTTPSPort(t, relRuntime(t, strict), backend)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			var dials atomic.Int32
			tr := &http2.Transport{AllowHTTP: true, TLSClientConfig: tlsCfg}
			addr := httpAddr
			if scheme == "http" {
				tr.DialTLSContext = func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
					dials.Add(1)
					var d net.Dialer
					return d.DialContext(ctx, network, a)
				}
			} else {
				addr = httpsAddr
				tr.DialTLSContext = func(ctx context.Context, network, a string, cfg *tls.Config) (net.Conn, error) {
					dials.Add(1)
					d := tls.Dialer{Config: cfg}
					return d.DialContext(ctx, network, a)
				}
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			do := func(method, query string, body io.Reader) *http.Response {
				t.Helper()
				req, _ := http.NewRequest(method, scheme+"://"+addr+"/"+query, body)
				req.Host = relHostname
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, query, err)
				}
				if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
					t.Fatalf("%s %s: %s %s", method, query, resp.Proto, resp.Status)
				}
				return resp
			}
			resp := do("GET", "?size=8000000", nil)
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != 8000000 {
				t.Fatalf("download: %d bytes, %v", n, err)
			}
			if got := resp.Header.Get("X-Proto"); got != scheme {
				t.Errorf("backend saw X-Forwarded-Proto %q", got)
			}
			resp = do("POST", "", bytes.NewReader(make([]byte, 4<<20)))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != strconv.Itoa(4<<20) {
				t.Fatalf("upload: backend read %s bytes", b)
			}
			for range 100 {
				// Closed after the response started: the client resets
				// the stream, which is no glitch.
				resp := do("GET", "?size=1000000", nil)
				resp.Body.Read(make([]byte, 10))
				resp.Body.Close()
			}
			if d := dials.Load(); d != 1 {
				t.Errorf("%d connections for one client: the guard ended one", d)
			}
		})
	}
}
