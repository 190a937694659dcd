// Package h1 is an HTTP/1.1 server connection loop: it serves HTTP/1.0 and
// HTTP/1.1 requests read from one accepted connection (plain, or TLS after
// its handshake) to an http.Handler, with a parser stricter than net/http's
// (RFC 9112 without its leniencies) and without the per-request goroutine
// and reads net/http's server pays on every kept-alive request. Answer
// reads a backend's answers with the same field and chunked rules, for a
// proxy's own HTTP/1.1 client.
package h1

import (
	"bufio"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"portico.dev/portico/internal/dataplane/reqtarget"
)

// parseError is a request that cannot be served: the status it is answered
// with (400, 431, 501, 505) and why, for the debug log only.
type parseError struct {
	status int
	why    string
}

func (e *parseError) Error() string { return e.why }

func badRequest(why string) *parseError { return &parseError{status: http.StatusBadRequest, why: why} }

var (
	errHeaderTooLarge = &parseError{status: http.StatusRequestHeaderFieldsTooLarge, why: "header too large"}
	errBareLF         = badRequest("line not ended by CRLF")
)

// errNotHTTP is a first line whose version field is not HTTP's at all:
// the client speaks another protocol, and an HTTP/1 answer would only be
// garbage to it. The connection closes without one. On a cleartext port
// that also takes HTTP/2 with prior knowledge this is what a mangled
// HTTP/2 connection preface gets: RFC 9113, 3.4 makes it a connection
// error, and with no HTTP/2 connection set up there is nothing to say it
// with but the close. Not a parseError, so that refuse sends nothing.
var errNotHTTP = errors.New("request line of another protocol than HTTP")

// readHead appends the request line and header fields, up to and including
// the empty line that ends them, to buf. limit bounds their bytes; a head
// longer than that is errHeaderTooLarge. Every line must end with CRLF: a
// bare LF, which net/http takes for a line end, is refused, so that no
// parser before or after Portico can split the head differently.
func readHead(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	start, lineStart := len(buf), len(buf)
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)-start+len(frag) > limit {
			return buf, errHeaderTooLarge
		}
		buf = append(buf, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return buf, err
		}
		n := len(buf)
		if n-lineStart < 2 || buf[n-2] != '\r' {
			return buf, errBareLF
		}
		if n-lineStart == 2 {
			if lineStart == start {
				return buf, badRequest("empty request line")
			}
			return buf, nil
		}
		lineStart = n
	}
}

// request is a parsed request head.
type request struct {
	method, target, proto string
	major, minor          int
	header                http.Header
	host                  string
	contentLength         int64 // -1: chunked; 0: no body
	chunked               bool
	close                 bool // the client asked for the connection to close
	expectContinue        bool
	trailer               http.Header // declared trailer names, nil values
}

// parseHead parses a head read by readHead into r. Strings of the request
// point into one copy of it, made here: one allocation for every value.
func parseHead(b []byte, r *request) error {
	s := string(b)
	// readHead ended every line with CRLF: cutting at LF is the same.
	line, rest := nextLine(s)
	*r = request{}
	if err := r.parseRequestLine(line); err != nil {
		return err
	}
	n := strings.Count(rest, "\n") - 1
	r.header = make(http.Header, n)
	strs := make([]string, n) // see addField
	var hosts, lengths, encodings int
	var seen fieldSet
	for {
		line, rest = nextLine(rest)
		if line == "" {
			break
		}
		name, value, err := parseField(line)
		if err != nil {
			return err
		}
		switch name {
		case "Host":
			hosts++
		case "Content-Length":
			lengths++
		case "Transfer-Encoding":
			encodings++
		default:
			seen |= fieldOf(name)
		}
		strs = addField(r.header, strs, name, value)
	}
	return r.checkFraming(hosts, lengths, encodings, seen)
}

// addField adds a field to h. A name's first value goes into strs[0], its
// slice capped so that an append elsewhere copies: one array holds the first
// value of every name (textproto does the same), one allocation instead of
// one per field. It returns what is left of strs.
func addField(h http.Header, strs []string, name, value string) []string {
	if vv, ok := h[name]; ok {
		h[name] = append(vv, value)
		return strs
	}
	strs[0] = value
	h[name] = strs[:1:1]
	return strs[1:]
}

func (r *request) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || !isToken(method) {
		return badRequest("malformed request line")
	}
	switch proto {
	case "HTTP/1.1":
		r.major, r.minor = 1, 1
	case "HTTP/1.0":
		r.major, r.minor = 1, 0
	default:
		if len(proto) == 8 && strings.HasPrefix(proto, "HTTP/") && isDigit(proto[5]) && proto[6] == '.' && isDigit(proto[7]) {
			return &parseError{status: http.StatusHTTPVersionNotSupported, why: "unsupported version " + proto}
		}
		// The line's last field is where HTTP puts its version (the
		// target may hold a space, a malformation of its own).
		if v := line[strings.LastIndexByte(line, ' ')+1:]; len(v) < 5 || !strings.EqualFold(v[:5], "HTTP/") {
			return errNotHTTP
		}
		return badRequest("malformed version")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return badRequest("malformed request target")
		}
	}
	switch {
	case target[0] == '/':
	case target == "*":
		if method != http.MethodOptions {
			return badRequest("asterisk-form target without OPTIONS")
		}
	case method == http.MethodConnect:
		// authority-form: host:port, checked when it is parsed.
		if strings.ContainsAny(target, "/?#@") {
			return badRequest("malformed CONNECT target")
		}
	case hasPrefixFold(target, "http://") || hasPrefixFold(target, "https://"):
		// absolute-form
	default:
		return badRequest("malformed request target")
	}
	r.method, r.target, r.proto = method, target, proto
	return nil
}

// parseField splits a header line into its canonical name and its value
// without surrounding whitespace. Whitespace before the colon, an obs-fold
// (a line starting with whitespace) and control bytes are refused.
func parseField(line string) (string, string, error) {
	colon := strings.IndexByte(line, ':')
	if colon <= 0 {
		return "", "", badRequest("malformed header line")
	}
	name := line[:colon]
	if !isToken(name) {
		return "", "", badRequest("malformed header name")
	}
	value := line[colon+1:]
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", badRequest("control byte in header value")
		}
	}
	return canonicalName(name), trimOWS(value), nil
}

// trimOWS removes the spaces and tabs around s: strings.Trim with a cutset
// builds a set on every call, once per header field.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// canonicalName is http.CanonicalHeaderKey without an allocation for a
// name already in canonical form, which every common client sends.
func canonicalName(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return http.CanonicalHeaderKey(name)
		}
		upper = c == '-'
	}
	return name
}

// checkFraming decides the body's framing and the Host, refusing every
// combination two parsers could read differently.
// fieldSet records which of the fields that framing looks at a head
// holds, as its fields are parsed: a map lookup of an absent name costs as
// much as one of a present name, and most heads hold none of these.
type fieldSet uint8

const (
	hasConnection fieldSet = 1 << iota
	hasExpect
	hasTrailer
	hasPragma
	hasTransferEncoding
	hasContentLength
	// hasHopByHop: any hop-by-hop field (RFC 9110 section 7.6.1, and
	// those proxies have long removed): Connection, Proxy-Connection,
	// Keep-Alive, Proxy-Authenticate, Proxy-Authorization, Te, Trailer,
	// Transfer-Encoding, Upgrade.
	hasHopByHop
)

// fieldOf is the fieldSet bits of the canonical name, 0 for the others.
func fieldOf(name string) fieldSet {
	switch name {
	case "Connection":
		return hasConnection | hasHopByHop
	case "Expect":
		return hasExpect
	case "Trailer":
		return hasTrailer | hasHopByHop
	case "Pragma":
		return hasPragma
	case "Transfer-Encoding":
		return hasTransferEncoding | hasHopByHop
	case "Content-Length":
		return hasContentLength
	case "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade":
		return hasHopByHop
	}
	return 0
}

// lookup is h[name] when seen says the head holds name, nil otherwise.
func (seen fieldSet) lookup(h http.Header, f fieldSet, name string) []string {
	if seen&f == 0 {
		return nil
	}
	return h[name]
}

func (r *request) checkFraming(hosts, lengths, encodings int, seen fieldSet) error {
	h := r.header
	switch {
	case hosts > 1:
		return badRequest("more than one Host")
	case hosts == 0 && r.minor == 1:
		return badRequest("missing Host")
	case hosts == 1:
		r.host = h["Host"][0]
		if !httpguts.ValidHostHeader(r.host) {
			return badRequest("malformed Host")
		}
	}
	switch {
	case encodings > 0 && lengths > 0:
		return badRequest("both Transfer-Encoding and Content-Length")
	case encodings > 0 && r.minor == 0:
		return badRequest("Transfer-Encoding in HTTP/1.0")
	case encodings > 1:
		return badRequest("more than one Transfer-Encoding")
	case encodings == 1:
		if !strings.EqualFold(h["Transfer-Encoding"][0], "chunked") {
			return &parseError{status: http.StatusNotImplemented, why: "unsupported transfer coding"}
		}
		r.chunked, r.contentLength = true, -1
	case lengths > 1:
		return badRequest("more than one Content-Length")
	case lengths == 1:
		v := h["Content-Length"][0]
		if v == "" || len(v) > 18 || !allDigits(v) {
			return badRequest("malformed Content-Length")
		}
		r.contentLength, _ = strconv.ParseInt(v, 10, 64)
	}
	conn := seen.lookup(h, hasConnection, "Connection")
	if r.minor == 1 {
		r.close = hasToken(conn, "close")
	} else {
		r.close = !hasToken(conn, "keep-alive")
	}
	if e := seen.lookup(h, hasExpect, "Expect"); e != nil {
		if len(e) != 1 || !strings.EqualFold(e[0], "100-continue") {
			return &parseError{status: http.StatusExpectationFailed, why: "unsupported expectation"}
		}
		// An HTTP/1.0 client cannot take a 100 (Continue): it sends its
		// body anyway.
		r.expectContinue = r.minor == 1 && r.contentLength != 0
	}
	if tr := seen.lookup(h, hasTrailer, "Trailer"); tr != nil && r.chunked {
		r.trailer = http.Header{}
		for _, v := range tr {
			for name := range strings.SplitSeq(v, ",") {
				name = http.CanonicalHeaderKey(strings.TrimSpace(name))
				switch name {
				case "Transfer-Encoding", "Trailer", "Content-Length", "Host":
					return badRequest("forbidden trailer name")
				case "":
					continue
				}
				r.trailer[name] = nil
			}
		}
	}
	return nil
}

// parseURL parses the request target into u as net/http does (with
// url.ParseRequestURI), a target in origin form without its copy of the
// URL.
func (r *request) parseURL(u *url.URL) error {
	raw := r.target
	if raw[0] == '/' {
		if err := reqtarget.Parse(u, raw); err != nil {
			return badRequest("malformed request target")
		}
		return nil
	}
	authority := r.method == http.MethodConnect
	if authority {
		raw = "http://" + raw
	}
	v, err := url.ParseRequestURI(raw)
	if err != nil {
		return badRequest("malformed request target")
	}
	if authority {
		v.Scheme = ""
	}
	*u = *v
	return nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}
