package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"portico.dev/portico/config"
)

const secret = "SECRET-ADMIN-CONTENT"

// fileTree makes a directory with pub/file.txt and admin/secret.txt: a
// route sends /pub to a file server over it, and nothing may read the
// secret through that route.
func fileTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range map[string]string{"pub/file.txt": "public", "admin/secret.txt": secret} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// serveBackend serves h on loopback and returns its address.
func serveBackend(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// lenientFiles is the most forgiving file server there is: it decodes
// escapes until none are left, treats '\' as '/', drops path parameters
// (";x") from every segment as servlet containers do, then resolves dot
// segments and serves the file. It names the request target it got in
// X-Seen.
func lenientFiles(root string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.RequestURI)
		p, _, _ := strings.Cut(r.RequestURI, "?")
		for range 3 {
			if dec, err := url.PathUnescape(p); err == nil {
				p = dec
			}
		}
		p = strings.ReplaceAll(p, `\`, "/")
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		b, err := os.ReadFile(filepath.Join(root, path.Clean("/"+strings.Join(segs, "/"))))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Write(b) //nolint:errcheck // test backend
	})
}

// rawHTTP1 sends one request with target written as it is and returns the
// answer's status, body and X-Seen header.
func rawHTTP1(t *testing.T, addr, target string) (int, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example.com\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Seen")
}

// h2cClient speaks HTTP/2 with prior knowledge to a cleartext port and
// sends a URL's Opaque as the :path as it is.
func h2cClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
}

func rawHTTP2(t *testing.T, c *http.Client, addr, target string) (int, string, string) {
	t.Helper()
	req := &http.Request{Method: "GET", Host: "app.example.com", Header: http.Header{},
		URL: &url.URL{Scheme: "http", Host: addr, Opaque: target}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("h2 GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("h2 GET %s: answered over HTTP/%d", target, resp.ProtoMajor)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Seen")
}

// TestReliabilityDotSegments replays path-based route bypasses: a route
// sends /pub to a file server that resolves "..", and every spelling of
// "go up and into /admin" is tried, over HTTP/1.1 and HTTP/2, against
// net/http's FileServer and against a file server that also decodes twice,
// splits at backslashes and drops path parameters. None may read the
// secret: each is refused (400) or normalised to a path no route serves
// (404).
func TestReliabilityDotSegments(t *testing.T) {
	root := fileTree(t)
	attacks := []string{
		"/pub/../admin/secret.txt",
		"/pub/%2e%2e/admin/secret.txt",
		"/pub/.%2E/admin/secret.txt",
		"/pub/%2E%2e/admin/secret.txt",
		"/pub/x/../../admin/secret.txt",
		"/pub/./../admin/secret.txt",
		"/pub//../admin/secret.txt",
		"/pub/..%2fadmin/secret.txt",
		"/pub/..%2Fadmin%2Fsecret.txt",
		"/pub%2f..%2fadmin%2fsecret.txt",
		"/pub/..;/admin/secret.txt",
		"/pub/..;x=1/admin/secret.txt",
		"/pub/%2e%2e;/admin/secret.txt",
		"/pub/..%3b/admin/secret.txt",
		`/pub/..\admin\secret.txt`,
		"/pub/..%5cadmin%5csecret.txt",
		"/pub/%5c..%5c..%5cadmin/secret.txt",
		"/pub/%252e%252e/admin/secret.txt",
		"/pub/%252e%252e%252fadmin%252fsecret.txt",
		"/pub/%25%32%65%25%32%65/admin/secret.txt",
		"/pub/..%252fadmin/secret.txt",
		"/pub/..%00/admin/secret.txt",
	}
	for _, backend := range []struct {
		name string
		h    http.Handler
	}{
		{"FileServer", http.FileServer(http.Dir(root))},
		{"lenient", lenientFiles(root)},
	} {
		t.Run(backend.name, func(t *testing.T) {
			rt := newRuntime(t)
			p := freePort(t)
			if err := rt.Apply(servicesConfig(t, p, testService{name: "pub", addr: serveBackend(t, backend.h)})); err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", p)
			h2 := h2cClient()
			if code, body, _ := rawHTTP1(t, addr, "/pub/file.txt"); code != 200 || body != "public" {
				t.Fatalf("/pub/file.txt: %d %q", code, body)
			}
			for _, target := range attacks {
				for proto, send := range map[string]func() (int, string, string){
					"HTTP/1.1": func() (int, string, string) { return rawHTTP1(t, addr, target) },
					"HTTP/2":   func() (int, string, string) { return rawHTTP2(t, h2, addr, target) },
				} {
					code, body, seen := send()
					if strings.Contains(body, secret) || (code != 400 && code != 404) {
						t.Errorf("%s %s: %d %q (backend saw %q), want 400 or 404 and no secret", proto, target, code, body, seen)
					}
				}
			}
			// The absolute form, which only HTTP/1.1 has.
			for _, target := range []string{"http://app.example.com/pub/../admin/secret.txt", "http://app.example.com/pub/%2e%2e/admin/secret.txt"} {
				if code, body, seen := rawHTTP1(t, addr, target); strings.Contains(body, secret) || code != 404 {
					t.Errorf("HTTP/1.1 %s: %d %q (backend saw %q), want 404 and no secret", target, code, body, seen)
				}
			}
		})
	}
}

// TestForwardedPathIsTheMatchedPath: the backend gets the normal form the
// route matched, the query exactly as sent (but for one with ";" or an
// invalid escape, which httputil.ReverseProxy re-encodes as routes parse
// it), and escapes that mean what they say are kept.
func TestForwardedPathIsTheMatchedPath(t *testing.T) {
	rt := newRuntime(t)
	p := freePort(t)
	if err := rt.Apply(servicesConfig(t, p, testService{name: "pub", addr: serveBackend(t, lenientFiles(fileTree(t)))})); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	h2 := h2cClient()
	for _, c := range []struct{ target, seen string }{
		{"/pub/file.txt", "/pub/file.txt"},
		{"/pub/x/../file.txt", "/pub/file.txt"},
		{"/pub//file.txt", "/pub/file.txt"},
		{"/pub/./%66ile.txt", "/pub/file.txt"},
		{"/pub/./file.txt?a=%2e%2e/&b=../x&c=%2F", "/pub/file.txt?a=%2e%2e/&b=../x&c=%2F"},
		{"/pub/a%20b/%c3%a9/x;y=1/!$&'()*+,=:@", "/pub/a%20b/%C3%A9/x;y=1/!$&'()*+,=:@"},
		{"/other/../pub/file.txt", "/pub/file.txt"},
	} {
		for proto, send := range map[string]func() (int, string, string){
			"HTTP/1.1": func() (int, string, string) { return rawHTTP1(t, addr, c.target) },
			"HTTP/2":   func() (int, string, string) { return rawHTTP2(t, h2, addr, c.target) },
		} {
			if _, _, seen := send(); seen != c.seen {
				t.Errorf("%s %s: backend saw %q, want %q", proto, c.target, seen, c.seen)
			}
		}
	}
}

// TestPathOptions: the escaped-slash action and slash merging are the
// runtime's to choose; whatever the choice, the backend gets what was
// matched.
func TestPathOptions(t *testing.T) {
	root := fileTree(t)
	for _, c := range []struct {
		opts         config.PathOptions
		target, seen string
		code         int
	}{
		{config.PathOptions{EscapedSlashes: config.EscapedSlashKeep}, "/pub/a%2fb%5C", "/pub/a%2Fb%5C", 404},
		{config.PathOptions{EscapedSlashes: config.EscapedSlashKeep}, `/pub/a\b`, "/pub/a%5Cb", 404},
		{config.PathOptions{EscapedSlashes: config.EscapedSlashUnescape}, "/pub/x%2f..%2ffile.txt", "/pub/file.txt", 200},
		{config.PathOptions{EscapedSlashes: config.EscapedSlashUnescape}, "/pub/..%2fadmin/secret.txt", "", 404},
		{config.PathOptions{KeepEmptySegments: true}, "/pub//file.txt", "/pub//file.txt", 200},
		{config.PathOptions{KeepEmptySegments: true}, "//pub/file.txt", "", 404},
	} {
		opts := DefaultOptions()
		opts.BindAddress = "127.0.0.1"
		opts.Paths = c.opts
		rt := New(opts, zap.NewNop())
		p := freePort(t)
		if err := rt.Apply(servicesConfig(t, p, testService{name: "pub", addr: serveBackend(t, lenientFiles(root))})); err != nil {
			t.Fatal(err)
		}
		code, _, seen := rawHTTP1(t, fmt.Sprintf("127.0.0.1:%d", p), c.target)
		if code != c.code || seen != c.seen {
			t.Errorf("%+v %s: %d, backend saw %q; want %d, %q", c.opts, c.target, code, seen, c.code, c.seen)
		}
		_ = rt.Close(t.Context())
	}
}
