package h1

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"portico.dev/portico/internal/dataplane/reqctx"
)

// preMax is how much of a response body is held before its head is sent:
// a body that ends within it is sent with a Content-Length.
const preMax = 2048

// response is the http.ResponseWriter of one request.
type response struct {
	c   *conn
	req *http.Request // &reqv
	// reqv is the request, held here so that request, context and
	// response cost one allocation; nothing of it is reused, so a handler
	// may keep them past its return.
	reqv http.Request
	url  url.URL
	body *body // nil for a request without one
	// ctx is the request's context, cancelled when the request ends
	// (or the client goes away) through its Cancel only.
	ctx    reqctx.Ctx
	header http.Header
	// received is when the request's head was read (see Received).
	received time.Time

	status int // the final status, once WriteHeader chose it
	// contentLength is the length the handler declared, -1 if none;
	// written counts the body bytes the handler wrote.
	contentLength, written int64
	isHEAD                 bool
	// sent: the head is on the connection's writer; chunked: the body
	// goes in chunks; closeAfter: the connection closes after this
	// response.
	sent, chunked, closeAfter bool
	noBody                    bool // the status allows no body
	hijacked                  bool
	fullDuplex                bool
	// trailers are the names the handler declared in a Trailer field.
	trailers []string
	// The 100 (Continue) the body sends at its first read, unless the
	// response started first.
	continueMu  sync.Mutex
	canContinue atomic.Bool
	continued   bool
	expect      bool // the client sent Expect: 100-continue
}

// Header is the connection's header map, cleared for every response: a
// handler must not use it after it returned, as with net/http.
func (w *response) Header() http.Header { return w.header }

// WriteHeader sends an informational (1xx) head at once; a final status is
// recorded and its head built from the header as it is now, to be sent
// with the first body bytes, at a flush or at the end.
func (w *response) WriteHeader(code int) {
	if w.hijacked {
		w.c.srv.log().Warn("response.WriteHeader on hijacked connection")
		return
	}
	if w.status != 0 {
		w.c.srv.log().Warn("superfluous response.WriteHeader call", zap.Int("code", code), zap.Int("status", w.status))
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.status = code
	w.noBody = !bodyAllowed(code)
	h := w.header
	if cl := headerGet(h, "Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 && allDigits(cl) {
			w.contentLength = n
		} else {
			w.c.srv.log().Warn("invalid Content-Length of the response", zap.String("value", cl))
			delete(h, "Content-Length")
		}
	}
	w.c.hdr = w.appendFields(w.c.hdr[:0])
}

// informational sends a 1xx head with the header as it is, to an HTTP/1.1
// client only.
func (w *response) informational(code int) {
	// An HTTP/1.0 client would take a 1xx for the final answer (RFC
	// 9110, section 15.2: none is sent to it).
	if w.sent || w.c.parsed.minor == 0 {
		return
	}
	// A 100 (Continue) that a body read on another goroutine sends is
	// written under continueMu: so is every other head.
	w.continueMu.Lock()
	defer w.continueMu.Unlock()
	if code == http.StatusContinue {
		if w.continued {
			return
		}
		w.continued = true
		w.canContinue.Store(false)
	}
	bw := w.c.bw
	writeStatusLine(bw, w.req.ProtoMinor, code)
	for k, vv := range w.header {
		// A 1xx has no content: a length or coding in its head would
		// tell a lenient recipient to read the final answer as its body.
		if k != "Content-Length" && k != "Transfer-Encoding" {
			writeField(bw, k, vv)
		}
	}
	bw.WriteString("\r\n")
	_ = bw.Flush()
}

// appendFields appends the handler's fields, as they will be sent, to b and
// notes the trailers it declares. Fields with names or values that could
// not be sent as they are (a CR or LF would split the head) are dropped.
func (w *response) appendFields(b []byte) []byte {
	w.trailers = w.trailers[:0]
	for k, vv := range w.header {
		switch {
		case strings.HasPrefix(k, http.TrailerPrefix):
			continue
		case k == "Transfer-Encoding":
			// The framing is Portico's to choose.
			continue
		case w.noBody && (k == "Content-Length" || k == "Content-Type"):
			continue
		case k == "Trailer":
			for _, v := range vv {
				for name := range strings.SplitSeq(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						w.trailers = append(w.trailers, http.CanonicalHeaderKey(name))
					}
				}
			}
		}
		b = appendField(b, k, vv)
	}
	return b
}

func appendField(b []byte, k string, vv []string) []byte {
	if !httpguts.ValidHeaderFieldName(k) {
		return b
	}
	for _, v := range vv {
		if !validValue(v) {
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return b
}

func writeField(bw *bufio.Writer, k string, vv []string) {
	bw.Write(appendField(bw.AvailableBuffer(), k, vv))
}

// validValue reports whether v can be sent as a field value: no CR, LF or
// NUL, which would end the field or the head early.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}

func headerGet(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength >= 0 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	c := w.c
	if !w.sent {
		if len(c.pre)+len(p) <= preMax {
			c.pre = append(c.pre, p...)
			return len(p), nil
		}
		if err := w.sendHead(false); err != nil {
			return 0, err
		}
	}
	return w.writeBody(p)
}

func (w *response) writeBody(p []byte) (int, error) {
	if w.isHEAD {
		return len(p), nil
	}
	bw := w.c.bw
	if !w.chunked {
		return bw.Write(p)
	}
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16))
	bw.WriteString("\r\n")
	n, err := bw.Write(p)
	if err == nil {
		_, err = bw.WriteString("\r\n")
	}
	return n, err
}

// sendHead writes the response head, then the body bytes held so far.
// final is set when the handler has returned: the held bytes are the
// whole body.
func (w *response) sendHead(final bool) error {
	c := w.c
	w.sent = true
	w.stopContinue()
	req := w.req
	bw := c.bw
	writeStatusLine(bw, req.ProtoMinor, w.status)
	bw.Write(c.hdr)
	h := w.header
	var extra []byte = bw.AvailableBuffer()
	if _, ok := h["Date"]; !ok {
		extra = append(extra, "Date: "...)
		extra = append(extra, c.date.Bytes(time.Now())...)
		extra = append(extra, "\r\n"...)
	}
	switch {
	case w.noBody:
	case w.contentLength >= 0:
	case final && len(w.trailers) == 0 && (!w.isHEAD || len(c.pre) > 0):
		w.contentLength = int64(len(c.pre))
		extra = append(extra, "Content-Length: "...)
		extra = strconv.AppendInt(extra, w.contentLength, 10)
		extra = append(extra, "\r\n"...)
	case w.isHEAD:
	case req.ProtoMinor >= 1:
		w.chunked = true
		extra = append(extra, "Transfer-Encoding: chunked\r\n"...)
	default:
		// An HTTP/1.0 client reads the body to the connection's end.
		w.closeAfter = true
	}
	w.keepAliveDecision()
	if _, ok := h["Content-Type"]; !ok && !w.noBody && len(c.pre) > 0 {
		extra = append(extra, "Content-Type: "...)
		extra = append(extra, http.DetectContentType(c.pre)...)
		extra = append(extra, "\r\n"...)
	}
	switch {
	case w.closeAfter:
		if !hasToken(h["Connection"], "close") {
			extra = append(extra, "Connection: close\r\n"...)
		}
	case req.ProtoMinor == 0:
		extra = append(extra, "Connection: keep-alive\r\n"...)
	}
	extra = append(extra, "\r\n"...)
	bw.Write(extra)
	pre := c.pre
	c.pre = c.pre[:0]
	if len(pre) > 0 {
		if _, err := w.writeBody(pre); err != nil {
			return err
		}
	}
	return nil
}

// keepAliveDecision decides, as the head is sent, whether the connection
// closes after this response.
func (w *response) keepAliveDecision() {
	req := w.req
	switch {
	case req.Close, w.c.srv.shutting.Load(), hasToken(w.header["Connection"], "close"):
		w.closeAfter = true
	case w.c.parsed.method == http.MethodConnect:
		// What follows a CONNECT head is tunnel data to its client (a
		// proxy in front may relay it before the answer), never a
		// request, whatever the answer: net/http closes too. The
		// parsed method, since a handler may change req.Method.
		w.closeAfter = true
	}
	if w.body == nil || w.fullDuplex {
		return
	}
	if unread, remain := w.body.unread(); unread {
		switch {
		case w.expect && !w.continued:
			// The client waits for a 100 (Continue) it will not get: its
			// body may or may not follow, so nothing more can be read.
			w.closeAfter = true
		case remain > maxPostHandlerRead:
			w.closeAfter = true
		}
	}
}

// stopContinue makes sure no 100 (Continue) follows the response's head,
// and that one being sent is written before the head, not at the same
// time: the lock is taken whenever one could have been sent, not only
// while one still can be.
func (w *response) stopContinue() {
	if w.expect {
		w.continueMu.Lock()
		w.canContinue.Store(false)
		w.continueMu.Unlock()
	}
}

// sendContinue runs at the first read of a body whose client expects a
// 100 (Continue): it sends one unless the response started already.
func (w *response) sendContinue() {
	w.continueMu.Lock()
	defer w.continueMu.Unlock()
	if !w.canContinue.Load() || w.continued {
		return
	}
	w.continued = true
	w.canContinue.Store(false)
	bw := w.c.bw
	bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	_ = bw.Flush()
}

// finish completes the response after the handler returned; it reports
// whether the connection can serve another request.
func (w *response) finish() bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		if err := w.sendHead(true); err != nil {
			return false
		}
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		w.writeTrailers()
		bw.WriteString("\r\n")
	}
	if w.contentLength >= 0 && w.written != w.contentLength && !w.isHEAD && !w.noBody {
		// Short of what was declared: the client would take the next
		// response for the rest.
		w.closeAfter = true
	}
	if err := bw.Flush(); err != nil {
		return false
	}
	if w.body != nil {
		// The rest of the body stands between the connection and its
		// next request: its drain is bounded like a head, or a client
		// that stops sending it would hold the connection forever.
		if d := w.c.headTimeout(); d > 0 && !w.closeAfter {
			_ = w.c.cr.setReadDeadline(time.Now().Add(d), rdArmed)
		}
		if !w.body.finish(maxPostHandlerRead, w.closeAfter) {
			return false
		}
	}
	return !w.closeAfter
}

// writeTrailers writes the values of the declared trailers and of the
// fields named with http.TrailerPrefix.
func (w *response) writeTrailers() {
	bw := w.c.bw
	for _, k := range w.trailers {
		if forbiddenTrailer(k) {
			continue
		}
		if vv := w.header[k]; len(vv) > 0 {
			writeField(bw, k, vv)
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && name != "" {
			if name = http.CanonicalHeaderKey(name); !forbiddenTrailer(name) {
				writeField(bw, name, vv)
			}
		}
	}
}

// forbiddenTrailer reports whether a field named name (canonical) must not
// travel in a trailer section: it frames or routes the message, controls
// the connection, or says how to read the content, all of which a
// recipient acted on before any trailer arrived (RFC 9110, section 6.5.1).
// One in a trailer is dropped, whichever side sent it: a recipient that
// merged it into the header section would read a message other than the
// one that was framed. The list is x/net's, so that HTTP/2 answers (whose
// trailers that server filters) and HTTP/1.1 ones lose the same fields.
func forbiddenTrailer(name string) bool { return !httpguts.ValidTrailerHeader(name) }

// FlushError sends what was written so far; a response without a declared
// length goes on in chunks.
func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		if err := w.sendHead(false); err != nil {
			return err
		}
	}
	return w.c.bw.Flush()
}

func (w *response) Flush() { _ = w.FlushError() }

// Hijack hands the connection over, with what was read of it but not yet
// used and the writer, after sending what the response wrote so far.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	c := w.c
	if w.status != 0 && !w.sent {
		if err := w.sendHead(false); err != nil {
			return nil, nil, err
		}
	}
	// No 100 (Continue) may reach the connection once it is handed over.
	w.stopContinue()
	if err := c.bw.Flush(); err != nil {
		return nil, nil, err
	}
	// Marked first: a watch starting now sees it, one started before is
	// aborted.
	c.hijacked.Store(true)
	if c.watcher.Stop() {
		c.watchArmed.Store(false)
	}
	// Marked before the background read is ended: a watch that starts
	// it in between sees the mark under the reader's lock and does not.
	c.hijacked.Store(true)
	c.cr.abortPending()
	c.cr.lift(rdStale) // the new owner reads without the server's deadline
	c.header = nil     // the handler may go on using it
	w.hijacked = true
	if w.body != nil {
		w.body.Close()
	}
	c.state.Store(stateClosed)
	c.srv.untrack(c)
	return c.rwc, bufio.NewReadWriter(c.br, c.bw), nil
}

// SetReadDeadline and SetWriteDeadline set the connection's deadlines for
// the rest of the request; they are lifted when its response is done.
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.readDeadline.Store(true)
	return w.c.cr.setReadDeadline(t, rdNone)
}

func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.writeDeadline.Store(true)
	return w.c.rwc.SetWriteDeadline(t)
}

// Received is when the server began serving the request, its head read:
// the server's one clock read for it, which a handler may use rather than
// read the clock again.
func (w *response) Received() time.Time { return w.received }

// EnableFullDuplex lets the handler write its response while it reads the
// request body: the body left unread when the head goes is not taken as
// abandoned.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// writeStatusLine writes the status line, with the version of the request
// as net/http does: an HTTP/1.0 client gets an HTTP/1.0 answer.
func writeStatusLine(bw *bufio.Writer, minor, code int) {
	b := bw.AvailableBuffer()
	if minor == 0 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, "\r\n"...)
	bw.Write(b)
}

// bodyAllowed reports whether a response with this status has a body.
func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}
