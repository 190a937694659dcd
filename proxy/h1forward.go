package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"portico.dev/portico/internal/dataplane/h1"
)

// The direct HTTP/1.1 path sends a request that has no body to a plain-text
// HTTP/1.1 backend without httputil.ReverseProxy and http.Transport: the
// handler's goroutine writes the request's headers, filtered as they are
// written, straight into a pooled connection's buffer, reads the answer
// from it and copies it to the client. It produces the request and the
// answer ReverseProxy with rewrite and modifyResponse would (the same
// headers removed and set, 1xx answers passed on, trailers, immediate
// flushes of streamed bodies, an aborted answer when the backend fails
// mid-body), without cloning the request and its headers, the transport's
// two goroutines per connection and their hand-offs, or the per-request
// trace and contexts. Everything else (bodies, upgrades, h2c and TLS
// backends, odd request targets) keeps the ReverseProxy path.

// h1Direct reports whether out, sent for x with the kept body (nil or
// empty when there is none), can take the direct path.
func h1Direct(x *exchange, out *http.Request, body []byte) bool {
	// A ContentLength of 0 is a request without a body whatever its Body
	// (an HTTP/2 request ending with its headers has one that is empty):
	// ReverseProxy sends it without one too.
	if x.tls != nil || x.h2c || len(body) > 0 || out.ContentLength != 0 ||
		out.Method == http.MethodConnect || out.URL.Opaque != "" {
		return false
	}
	if _, ok := out.Header["Upgrade"]; ok {
		return false
	}
	// ReverseProxy re-encodes a query it cannot parse, and its transport
	// a Host that is not ASCII or has an IPv6 zone ("%25eth0"): such
	// requests are rare enough to leave to it.
	return cleanQuery(out.URL.RawQuery) && validTarget(out.URL.RawQuery) &&
		(out.Host == "" || httpguts.ValidHostHeader(out.Host) && isASCII(out.Host) &&
			strings.IndexByte(out.Host, '%') < 0)
}

// cleanQuery reports whether ReverseProxy leaves query as it is: no ';',
// only well-formed escapes, at most 10,000 parameters.
func cleanQuery(q string) bool {
	if strings.Count(q, "&") >= 10000 {
		return false
	}
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validTarget reports whether s holds no control byte or space, which a
// request line cannot carry.
func validTarget(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// errNothingRead marks a failure on a reused connection before any byte of
// an answer arrived: the backend closed it as it was taken, and a request
// that can be sent again is sent on another connection.
type errNothingRead struct{ err error }

func (e errNothingRead) Error() string { return e.err.Error() }
func (e errNothingRead) Unwrap() error { return e.err }

// serveDirect forwards out to x.addr over the direct path and answers w.
// ctx is the attempt's context; a failure before the answer started goes to
// proxyError, as ReverseProxy's would. headTimeout, when not 0, bounds the
// wait for the head of the final answer (Options.BackendResponseTimeout).
func (f *forwarder) serveDirect(ctx context.Context, w http.ResponseWriter, out *http.Request, x *exchange, headTimeout time.Duration) {
	for {
		c, err := f.pool.get(ctx, x.addr)
		if err != nil {
			f.proxyError(w, out.WithContext(ctx), err)
			return
		}
		// Set before the abort is hooked: an abort must win over it.
		c.armHead(c.takenAt, headTimeout)
		stop := c.abortWhenDone(ctx, x)
		resp, err := c.roundTrip(w, out, x)
		if err == nil {
			f.answerDirect(ctx, w, out, x, c, stop, resp)
			return
		}
		stop()
		if errors.Is(err, errUnaskedBytes) {
			f.judgeStale(c)
		}
		c.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		} else if headTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			err = errNoAnswerInTime // never sent again: the backend has it
		}
		if errors.Is(err, errStaleConn) {
			continue // nothing of the request went out: any method goes again
		}
		var nr errNothingRead
		if errors.As(err, &nr) && c.reused && ctx.Err() == nil && replayable(out) {
			continue
		}
		f.proxyError(w, out.WithContext(ctx), err)
		return
	}
}

// replayable reports whether a request without a body may be sent a second
// time after a reused connection failed (http.Transport's rule).
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, ok := r.Header["Idempotency-Key"]
	_, xok := r.Header["X-Idempotency-Key"]
	return ok || xok
}

// roundTrip writes out and reads the final answer's head into c.ans,
// passing 1xx answers on to w.
func (c *h1Conn) roundTrip(w http.ResponseWriter, out *http.Request, x *exchange) (*h1.Answer, error) {
	c.beginRequest()
	if err := c.writeRequest(out, x); err != nil {
		return nil, err
	}
	c.lastFlush = true
	err := c.bw.Flush()
	c.lastFlush = false
	if errors.Is(err, errStaleConn) {
		return nil, err
	}
	if err != nil {
		return nil, errNothingRead{err}
	}
	// One limit spans the bytes of the heads of every 1xx and of the final
	// answer; how many 1xx heads are relayed is capped by the gate
	// (Options.MaxInformational), as on the ReverseProxy path.
	c.readLimit = h1MaxResponseHeader
	a := &c.ans
	for n1xx := 0; ; n1xx++ {
		// Once a 1xx arrived the backend has the request: a failure then
		// is no stale connection, and sending it again would repeat it.
		if _, err := c.br.Peek(1); err != nil && n1xx == 0 {
			return nil, errNothingRead{err}
		}
		if err := a.ReadHead(c.br, out.Method, h1MaxResponseHeader); err != nil {
			return nil, fmt.Errorf("reading the backend's answer: %w", err)
		}
		switch {
		case a.Status == http.StatusSwitchingProtocols:
			return nil, errors.New("backend switched protocols without being asked to")
		case a.Status < 200:
			h := w.Header()
			copyHeader(h, a.Header)
			w.WriteHeader(a.Status)
			clear(h)
			if x.gate.over1xx() {
				return nil, errTooManyInformational
			}
			continue
		}
		c.readLimit = 1<<63 - 1
		c.inBody = true
		return a, nil
	}
}

// answerDirect sends the answer a to the client: what ReverseProxy does
// after its transport answered.
func (f *forwarder) answerDirect(ctx context.Context, w http.ResponseWriter, out *http.Request, x *exchange, c *h1Conn, stop func() bool, a *h1.Answer) {
	kept := false
	defer func() {
		// Whatever ends the answer early (a panic included), the
		// connection is in an unknown state: closed, never pooled.
		if !kept {
			stop()
			c.conn.Close()
		}
	}()
	if a.HopByHop() {
		removeHopByHop(a.Header)
	}
	x.answered = int16(min(a.Status, 999))
	if slices.Contains(x.retryCodes, a.Status) {
		f.proxyError(w, out.WithContext(ctx), errRetryableStatus)
		return
	}
	for _, fl := range x.respFilters {
		fl.Apply(a.Header)
	}
	if x.cors != nil {
		x.cors.Apply(x.in, a.Header)
	}
	x.sess.apply(a.Header)
	h := w.Header()
	copyHeader(h, a.Header)
	announced := len(a.Announced)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range a.Announced {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(a.Status)
	streamed := a.ContentLength == -1 || isEventStream(a.Header)
	if err := f.copyBody(w, a, streamed); err != nil {
		f.answerFailed(out.WithContext(ctx), x, err)
		return
	}
	if trailer := a.Trailers(); len(trailer) > 0 {
		// Force chunking, as ReverseProxy does, so trailers can follow.
		http.NewResponseController(w).Flush() //nolint:errcheck // as ReverseProxy
		if len(trailer) == announced {
			copyHeader(h, trailer)
		} else {
			for k, vv := range trailer {
				for _, v := range vv {
					h.Add(http.TrailerPrefix+k, v)
				}
			}
		}
	}
	if !stop() {
		return
	}
	if a.Reusable(c.br) {
		kept = true
		// Nothing of the answer stays with the idle connection.
		a.Release()
		f.pool.put(c)
	} else if c.br.Buffered() > 0 {
		// The body was read to its end (copyBody returned no error):
		// what follows came with it, asked by no request.
		f.caughtUnasked(c.addr, "bytes past the end of an answer")
	}
}

// copyBody copies an answer's body to w through a pooled buffer, flushing
// every write when the body is streamed.
func (f *forwarder) copyBody(w http.ResponseWriter, body io.Reader, streamed bool) error {
	var flusher http.Flusher
	if streamed {
		flusher, _ = w.(http.Flusher)
		if flusher != nil {
			// The headers go at once, before any of the body exists.
			flusher.Flush()
		}
	}
	buf := f.bufs.Get()
	defer f.bufs.Put(buf)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// isEventStream reports whether h says text/event-stream, whose events
// must reach the client as they come.
func isEventStream(h http.Header) bool {
	ct := h["Content-Type"]
	if len(ct) == 0 {
		return false
	}
	mt, _, _ := strings.Cut(ct[0], ";")
	return strings.EqualFold(textproto.TrimString(mt), "text/event-stream")
}

// copyHeader adds src's values to dst, sharing the value slices when dst
// has none of a name (src is not used afterwards).
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// hopHeaders are the hop-by-hop headers ReverseProxy removes both ways.
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// isHopHeader reports whether name is one of hopHeaders.
func isHopHeader(name string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// removeHopByHop removes the headers h's Connection header names and the
// hop-by-hop ones.
func removeHopByHop(h http.Header) {
	if len(h) < len(hopHeaders) {
		// Most heads hold a few fields and none of these: one pass over
		// them costs less than a lookup of every hop-by-hop name.
		found := false
		for name := range h {
			if isHopHeader(name) {
				found = true
				break
			}
		}
		if !found {
			return
		}
	}
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(h, name)
	}
}

// writeRequest writes out's request line and headers, as ReverseProxy's
// rewrite and http.Transport would send them, into c's buffer.
func (c *h1Conn) writeRequest(out *http.Request, x *exchange) error {
	bw := c.bw
	// An HTTP/2 :method is checked for control bytes only: one with a
	// space would make the request line say another target than the one
	// routed. http.Transport refuses a method that is not a token too.
	if !httpguts.ValidHeaderFieldName(out.Method) {
		return errors.New("invalid request method")
	}
	path := out.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if !validTarget(path) {
		return errors.New("invalid request path")
	}
	bw.WriteString(out.Method)
	bw.WriteByte(' ')
	bw.WriteString(path)
	if out.URL.ForceQuery || out.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(out.URL.RawQuery)
	}
	host := out.Host
	if host == "" {
		host = x.addr
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if ua := out.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		if err := writeField(bw, "User-Agent", ua[:1]); err != nil {
			return err
		}
	}
	if out.Method != http.MethodGet && out.Method != http.MethodHead {
		bw.WriteString("Content-Length: 0\r\n")
	}
	keys := c.keys[:0]
	connection := out.Header["Connection"]
	for k := range out.Header {
		if !dropOutbound(k, connection) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	c.keys = keys
	for _, k := range keys {
		if err := writeField(bw, k, out.Header[k]); err != nil {
			return err
		}
	}
	if httpguts.HeaderValuesContainsToken(out.Header["Te"], "trailers") {
		bw.WriteString("Te: trailers\r\n")
	}
	if ip, _, err := net.SplitHostPort(out.RemoteAddr); err == nil {
		writeLine(bw, "X-Forwarded-For", ip)
	}
	writeLine(bw, "X-Forwarded-Host", x.origHost)
	if out.TLS == nil {
		bw.WriteString("X-Forwarded-Proto: http\r\n")
	} else {
		bw.WriteString("X-Forwarded-Proto: https\r\n")
	}
	writeLine(bw, "X-Forwarded-Port", x.port)
	if x.listener != nil && x.listener.ClientAuth != nil {
		if v := verifiedClientCert(out, x.listener); v != "" {
			writeLine(bw, clientCertHeader, v)
		}
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		return errNothingRead{err} // the buffer filled and flushing it failed
	}
	return nil
}

// dropOutbound reports whether the request header named k is not sent as
// it came: what the transport writes itself, hop-by-hop headers and those
// the Connection header names, forwarding headers and the verified client
// certificate, which Portico sets, and HTTP2-Settings.
func dropOutbound(k string, connection []string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer",
		"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Upgrade", "Http2-Settings", clientCertHeader:
		return true
	}
	if isForwardingHeader(k) || strings.IndexByte(k, '_') >= 0 && headerNameEqual(k, "x-request-id") {
		return true
	}
	for _, v := range connection {
		for name := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(name), k) {
				return true
			}
		}
	}
	return false
}

// writeField writes one header field per value, refusing what could not be
// a header (http.Transport refuses the request too).
func writeField(bw *bufio.Writer, k string, vv []string) error {
	if !httpguts.ValidHeaderFieldName(k) {
		return fmt.Errorf("invalid header field name %q", k)
	}
	for _, v := range vv {
		if !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("invalid header field value for %q", k)
		}
		writeLine(bw, k, textproto.TrimString(v))
	}
	return nil
}

func writeLine(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}
