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

// TestFrameScannerAcrossChunks: frame headers are found whatever chunks
// the bytes come in, down to one byte at a time, and a stop cuts the
// chunk just after the frame that asked for it.
func TestFrameScannerAcrossChunks(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte("abc"), EndHeaders: true})
	fr.WriteData(1, false, bytes.Repeat([]byte("d"), 1000))
	fr.WriteData(1, true, nil)
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	fr.WritePing(false, [8]byte{})
	want := []string{"4/0/0/0", "1/4/3/1", "0/0/1000/1", "0/1/0/1", "3/0/4/3", "6/0/8/0"}
	wire := buf.Bytes()
	for _, size := range []int{1, 2, 7, 9, 10, 64, len(wire)} {
		var got []string
		s := frameScanner{skip: len(http2.ClientPreface)}
		for p := wire; len(p) > 0; {
			n := min(size, len(p))
			s.scan(p[:n], func(typ, flags byte, length int, id uint32) bool {
				got = append(got, fmt.Sprintf("%d/%d/%d/%d", typ, flags, length, id))
				return false
			})
			p = p[n:]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("chunks of %d: %q, want %q", size, got, want)
		}
	}
	// Stopping at the DATA frame of 1000 bytes cuts just past it.
	s := frameScanner{skip: len(http2.ClientPreface)}
	cut, stop := s.scan(wire, func(typ, _ byte, length int, _ uint32) bool { return typ == frameData && length == 1000 })
	end := len(http2.ClientPreface) + 9 + 9 + 3 + 9 + 1000
	if !stop || cut != end {
		t.Errorf("stop at the DATA frame: cut %d (stop %v), want %d", cut, stop, end)
	}
}

// TestH2GuardSparesBrowserPatterns: frames browsers and gRPC clients send
// in proportion to their traffic (PRIORITY_UPDATE and PRIORITY per stream,
// a WINDOW_UPDATE pair and a bandwidth-measuring PING per DATA frame
// received) stay below a strict limit however long the traffic goes on.
func TestH2GuardSparesBrowserPatterns(t *testing.T) {
	const streams = 60
	rt := relRuntime(t, func(o *Options) { o.H2MaxGlitches = 20; o.H2GlitchesForgiven = 1 })
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 100000))
	})
	c, err := net.Dial("tcp", relHTTPPort(t, rt, backend))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := newH2Client(t, c, "http")
	done := make(chan error, 1)
	go func() {
		finished := 0
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				done <- err
				return
			}
			var werr error
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					werr = h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
				}
			case *http2.GoAwayFrame:
				done <- fmt.Errorf("GOAWAY %v after %d streams", f.ErrCode, finished)
				return
			case *http2.DataFrame:
				n := uint32(len(f.Data()))
				werr = h.write(func(fr *http2.Framer) error {
					if n > 0 {
						fr.WriteWindowUpdate(0, n)
						fr.WriteWindowUpdate(f.StreamID, n)
					}
					return fr.WritePing(false, [8]byte{byte(n)})
				})
				if f.StreamEnded() {
					if finished++; finished == streams {
						done <- nil
						return
					}
				}
			}
			if werr != nil {
				done <- werr
				return
			}
		}
	}()
	for i := range streams {
		id := uint32(2*i + 1)
		err := h.write(func(fr *http2.Framer) error {
			return fr.WritePriority(id, http2.PriorityParam{Weight: 100})
		})
		if err == nil {
			err = h.get(id, "/")
		}
		if err == nil {
			err = h.write(func(fr *http2.Framer) error { return fr.WritePriorityUpdate(id, "u=2") })
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("responses did not complete")
	}
}
