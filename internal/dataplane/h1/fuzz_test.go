package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
)

// parseRequest reads one request from raw as the server does: head, then
// its body whole.
func parseRequest(raw []byte) (*request, []byte, http.Header, error) {
	br := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
	head, err := readHead(br, nil, 16<<10)
	if err != nil {
		return nil, nil, nil, err
	}
	p := &request{}
	if err := parseHead(head, p); err != nil {
		return nil, nil, nil, err
	}
	if err := p.parseURL(&url.URL{}); err != nil {
		return nil, nil, nil, err
	}
	var trailer http.Header
	var b []byte
	switch {
	case p.chunked:
		b, err = io.ReadAll(&body{br: br, chunked: true, first: true, maxTrailer: 16 << 10, trailer: &trailer})
	case p.contentLength > 0:
		b, err = io.ReadAll(&body{br: br, remain: p.contentLength})
	}
	return p, b, trailer, err
}

// FuzzParseAgainstNetHTTP: whatever Portico's parser accepts, net/http's
// accepts too, with the same method, target, Host, fields, body and
// trailer. Portico's may refuse more (it is stricter), never less.
func FuzzParseAgainstNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /p?q=1 HTTP/1.0\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nX-T: v\r\n\r\n",
		"GET http://b/ HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"CONNECT b:443 HTTP/1.1\r\nHost: b:443\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET /%zz HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, b, trailer, err := parseRequest(raw)
		if err != nil {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("Portico accepts what net/http refuses (%v): %q", err, raw)
		}
		nb, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatalf("net/http cannot read a body Portico reads (%v): %q", err, raw)
		}
		host := p.host
		if u := (&url.URL{}); p.parseURL(u) == nil && u.Host != "" {
			host = u.Host
		}
		h := p.header.Clone()
		delete(h, "Host")
		if p.chunked {
			delete(h, "Transfer-Encoding")
		}
		switch {
		case r.Method != p.method || r.RequestURI != p.target || r.Host != host:
			t.Fatalf("%q: net/http %s %s %s, Portico %s %s %s", raw, r.Method, r.RequestURI, r.Host, p.method, p.target, host)
		case !sameHeader(r.Header, h):
			t.Fatalf("%q: net/http fields %v, Portico %v", raw, r.Header, h)
		case !bytes.Equal(nb, b):
			t.Fatalf("%q: net/http body %q, Portico %q", raw, nb, b)
		case len(trailer) > 0 && !sameHeader(r.Trailer, trailer):
			t.Fatalf("%q: net/http trailer %v, Portico %v", raw, r.Trailer, trailer)
		case r.Close != p.close:
			t.Fatalf("%q: net/http close %v, Portico %v", raw, r.Close, p.close)
		}
	})
}

func sameHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !slices.Equal(va, vb) {
			return false
		}
	}
	return true
}
