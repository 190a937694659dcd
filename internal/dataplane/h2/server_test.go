package h2

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// testServer serves srv on a loopback listener, cleartext or TLS.
type testServer struct {
	srv  *Server
	ln   net.Listener
	addr string
	tls  bool
	wg   sync.WaitGroup
}

func startServer(t testing.TB, srv *Server, useTLS bool) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: srv, ln: ln, addr: ln.Addr().String(), tls: useTLS}
	var cfg *tls.Config
	if useTLS {
		cfg = &tls.Config{Certificates: []tls.Certificate{testCert(t)}, NextProtos: []string{"h2"}}
	}
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				if cfg != nil {
					tc := tls.Server(c, cfg)
					if err := tc.Handshake(); err != nil {
						c.Close()
						return
					}
					c = tc
				}
				srv.ServeConn(context.Background(), c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
		ts.wg.Wait()
	})
	return ts
}

func (ts *testServer) url() string {
	if ts.tls {
		return "https://" + ts.addr
	}
	return "http://" + ts.addr
}

// client is an x/net HTTP/2 client of ts: prior knowledge for cleartext.
func (ts *testServer) client(t testing.TB) *http.Client {
	tr := &http2.Transport{}
	if ts.tls {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	} else {
		tr.AllowHTTP = true
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func testCert(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// both runs f against a cleartext and a TLS server.
func both(t *testing.T, f func(t *testing.T, useTLS bool)) {
	t.Run("h2c", func(t *testing.T) { f(t, false) })
	t.Run("tls", func(t *testing.T) { f(t, true) })
}

func TestGetAndPost(t *testing.T) {
	both(t, func(t *testing.T, useTLS bool) {
		srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Proto != "HTTP/2.0" || r.ProtoMajor != 2 {
				t.Errorf("proto %q", r.Proto)
			}
			if (r.TLS != nil) != useTLS {
				t.Errorf("TLS state %v", r.TLS)
			}
			if r.RemoteAddr == "" || !strings.HasPrefix(r.Host, "127.0.0.1:") {
				t.Errorf("remote %q host %q", r.RemoteAddr, r.Host)
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading the body: %v", err)
			}
			w.Header().Set("X-Method", r.Method)
			w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
			fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), body)
		})}
		ts := startServer(t, srv, useTLS)
		cl := ts.client(t)
		res, err := cl.Get(ts.url() + "/a/b?c=d")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(got) != "GET /a/b?c=d " || res.Header.Get("X-Method") != "GET" || res.ContentLength != int64(len(got)) {
			t.Fatalf("GET: %q %v length %d", got, res.Header, res.ContentLength)
		}
		if res.Header.Get("X-Length") != "0" || res.Header.Get("Date") == "" {
			t.Fatalf("GET head %v", res.Header)
		}
		res, err = cl.Post(ts.url()+"/p", "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if string(got) != "POST /p hello" || res.Header.Get("X-Length") != "5" {
			t.Fatalf("POST: %q %v", got, res.Header)
		}
	})
}

// TestLargeBodies moves bodies many times the windows both ways.
func TestLargeBodies(t *testing.T) {
	both(t, func(t *testing.T, useTLS bool) {
		srv := &Server{MaxUploadBufferPerConnection: 96 << 10, MaxUploadBufferPerStream: 32 << 10,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, err := io.Copy(io.Discard, r.Body)
				if err != nil {
					t.Errorf("reading: %v", err)
				}
				w.Header().Set("X-Got", fmt.Sprint(n))
				chunk := bytes.Repeat([]byte("x"), 10000)
				for range 500 {
					if _, err := w.Write(chunk); err != nil {
						t.Errorf("writing: %v", err)
						return
					}
				}
			})}
		ts := startServer(t, srv, useTLS)
		cl := ts.client(t)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := cl.Post(ts.url(), "application/octet-stream", bytes.NewReader(make([]byte, 3<<20)))
				if err != nil {
					t.Error(err)
					return
				}
				n, err := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil || n != 5000000 || res.Header.Get("X-Got") != fmt.Sprint(3<<20) {
					t.Errorf("got %d bytes (%v), server got %s", n, err, res.Header.Get("X-Got"))
				}
			}()
		}
		wg.Wait()
	})
}

func TestManyStreams(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})}
	ts := startServer(t, srv, false)
	cl := ts.client(t)
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/%d", i)
			res, err := cl.Get(ts.url() + path)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != path {
				t.Errorf("got %q for %s", b, path)
			}
		}()
	}
	wg.Wait()
}

func TestTrailers(t *testing.T) {
	both(t, func(t *testing.T, useTLS bool) {
		srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Trailer", "X-Declared")
			w.WriteHeader(200)
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Declared", "d:"+r.Trailer.Get("X-Req"))
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		})}
		ts := startServer(t, srv, useTLS)
		cl := ts.client(t)
		req, _ := http.NewRequest("POST", ts.url(), io.MultiReader(strings.NewReader("abc")))
		req.Trailer = http.Header{"X-Req": {"rv"}}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "body" || res.Trailer.Get("X-Declared") != "d:rv" || res.Trailer.Get("Grpc-Status") != "0" {
			t.Fatalf("body %q trailer %v", b, res.Trailer)
		}
	})
}

// TestFlushStreams checks that flushed bytes reach the client while the
// handler still runs.
func TestFlushStreams(t *testing.T) {
	release := make(chan struct{})
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-release
		io.WriteString(w, "second")
	})}
	ts := startServer(t, srv, false)
	res, err := ts.client(t).Get(ts.url())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first chunk %q %v", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(res.Body)
	if string(rest) != "second" {
		t.Fatalf("rest %q", rest)
	}
}

func TestFullDuplexEcho(t *testing.T) {
	both(t, func(t *testing.T, useTLS bool) {
		srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			if err := rc.EnableFullDuplex(); err != nil {
				t.Errorf("full duplex: %v", err)
			}
			w.WriteHeader(200)
			rc.Flush()
			buf := make([]byte, 64)
			for {
				n, err := r.Body.Read(buf)
				if n > 0 {
					w.Write(buf[:n])
					rc.Flush()
				}
				if err != nil {
					return
				}
			}
		})}
		ts := startServer(t, srv, useTLS)
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", ts.url(), pr)
		res, err := ts.client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		for i := range 5 {
			msg := fmt.Sprintf("ping %d", i)
			pw.Write([]byte(msg))
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != msg {
				t.Fatalf("echo %q %v", buf, err)
			}
		}
		pw.Close()
		if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
			t.Fatalf("end %q %v", rest, err)
		}
	})
}

func TestInformational(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "done")
	})}
	ts := startServer(t, srv, false)
	var got []int
	var link string
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			got = append(got, code)
			link = h.Get("Link")
			return nil
		}})
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url(), nil)
	res, err := ts.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if len(got) != 1 || got[0] != 103 || link == "" || string(b) != "done" || res.Header.Get("Link") != "" {
		t.Fatalf("1xx %v link %q body %q head %v", got, link, b, res.Header)
	}
}

func TestClientResetCancelsContext(t *testing.T) {
	cancelled := make(chan error, 1)
	started := make(chan struct{})
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- context.Cause(r.Context())
		case <-time.After(10 * time.Second):
			cancelled <- nil
		}
	})}
	ts := startServer(t, srv, false)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url(), nil)
	res, err := ts.client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	res.Body.Close()
	if err := <-cancelled; err == nil {
		t.Fatal("the handler's context was not cancelled by the client's reset")
	}
}
