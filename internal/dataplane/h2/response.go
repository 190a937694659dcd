package h2

import (
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

type hpackField = hpack.HeaderField

// holdSize is how much of a body a response holds before sending it: a
// short response goes out whole, with a Content-Length, in one write.
const holdSize = 4096

// responseWriter is a stream's http.ResponseWriter. Only the handler's
// goroutine uses it, except for the deadline methods.
type responseWriter struct {
	st            *stream
	header        http.Header
	status        int
	wroteHeader   bool // a final status was set
	sentHeader    bool // its HEADERS frame was written
	noBody        bool
	isHEAD        bool
	contentLength int64 // declared, or -1
	written       int64
	held          []byte
	heldp         *[]byte  // held's buffer, from the server's pool
	trailers      []string // declared in the Trailer field
}

func (w *responseWriter) reset(st *stream) {
	*w = responseWriter{st: st, contentLength: -1, isHEAD: st.req.Method == http.MethodHead}
}

// Header is a map the connection reuses once the handler returned and the
// response is over: a handler must not use it after it returned, as with
// net/http.
func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = w.st.c.headerMap()
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader {
		w.st.c.srv.log().Debug("superfluous WriteHeader on an HTTP/2 stream", zap.Int("code", code))
		return
	}
	if code < 200 {
		if code != http.StatusSwitchingProtocols {
			w.informational(code)
		}
		return
	}
	w.wroteHeader, w.status = true, code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified
	h := w.header
	if cl := h["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		} else {
			delete(h, "Content-Length")
		}
	}
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
				w.trailers = append(w.trailers, k)
			}
		}
	}
}

// informational sends a 1xx head at once, with the fields set so far.
func (w *responseWriter) informational(code int) {
	st := w.st
	c := st.c
	c.lockWrite()
	if !st.dead.Load() {
		c.encodeHead(code, w.header)
		c.writeBlock(st.id, false)
	}
	_ = c.unlockWrite()
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.isHEAD {
		return len(p), nil
	}
	if len(w.held)+len(p) <= holdSize && !w.sentHeader {
		if w.heldp == nil {
			w.heldp = w.st.c.srv.heldBuf()
			w.held = (*w.heldp)[:0]
		}
		w.held = append(w.held, p...)
		return len(p), nil
	}
	if err := w.sendHead(false); err != nil {
		return 0, err
	}
	if err := w.st.writeData(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *responseWriter) WriteString(s string) (int, error) {
	if len(w.held)+len(s) <= holdSize && w.wroteHeader && !w.sentHeader && !w.noBody && !w.isHEAD &&
		(w.contentLength < 0 || w.written+int64(len(s)) <= w.contentLength) {
		if w.heldp == nil {
			w.heldp = w.st.c.srv.heldBuf()
			w.held = (*w.heldp)[:0]
		}
		w.held = append(w.held, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// sendHead writes the HEADERS frame and the held body bytes. final is
// set when the handler has returned: the held bytes are the whole body.
func (w *responseWriter) sendHead(final bool) error {
	if w.sentHeader {
		return nil
	}
	w.sentHeader = true
	st := w.st
	c := st.c
	h := w.header
	held, heldp := w.held, w.heldp
	w.held, w.heldp = nil, nil
	defer c.srv.putHeldBuf(heldp)
	trailers := final && w.hasTrailers()
	// The whole response in one HEADERS frame when there is no body.
	end := final && len(held) == 0 && !trailers
	// A held body that the windows and the client's frame size take whole
	// goes out with the HEADERS, in the same write section and so the same
	// flush: one TLS record and one system call per small answer, not two.
	dataEnd := final && !trailers
	var withData bool
	var shrinks uint32
	if len(held) > 0 {
		withData, shrinks = st.reserve(int64(len(held)), dataEnd)
	}
	c.lockWrite()
	if st.dead.Load() {
		_ = c.unlockWrite()
		if withData {
			// The connection's window is shared: what a reset stream
			// took and never sent goes back to the others.
			st.giveBack(int64(len(held)), dataEnd)
		}
		return st.writeErr()
	}
	c.encodeHead(w.status, h)
	if _, ok := h["Date"]; !ok {
		c.field("date", c.date.String(time.Now()))
	}
	if _, ok := h["Content-Type"]; !ok && len(held) > 0 {
		c.field("content-type", http.DetectContentType(held))
	}
	if final && w.contentLength < 0 && !trailers && !w.noBody && (!w.isHEAD || w.written > 0) {
		c.field("content-length", strconv.FormatInt(w.written, 10))
	}
	c.writeBlock(st.id, end)
	st.finalSent.Store(true)
	if withData && c.shrinks.Load() != shrinks {
		// A SETTINGS frame shrank the windows since they were taken (see
		// writeData): the body goes the long way, sized again.
		st.giveBack(int64(len(held)), dataEnd)
		withData = false
	}
	if withData {
		c.wfr.WriteData(st.id, dataEnd, held)
	}
	if end {
		// Before the flush: a frame the client sends once it has seen the
		// END_STREAM must find the stream closed both ways (onTrailers).
		c.mu.Lock()
		st.sendClosed = true
		c.mu.Unlock()
	}
	err := c.unlockWrite()
	if err != nil {
		return err
	}
	if len(held) > 0 && !withData {
		return st.writeData(held, dataEnd)
	}
	return nil
}

// reserve takes n bytes of the stream's and the connection's send windows
// when both have them and the client's frame size allows one frame of n,
// without waiting; end marks the stream's sending closed with it. False:
// nothing taken, writeData is the way. shrinks is the connection's count
// of shrinking SETTINGS when the windows were taken.
func (st *stream) reserve(n int64, end bool) (ok bool, shrinks uint32) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.aborted || c.closed || n > st.sendWindow || n > c.sendWindow || n > int64(c.peerFrame) {
		return false, 0
	}
	st.sendWindow -= n
	c.sendWindow -= n
	if end {
		st.sendClosed = true
	}
	return true, c.shrinks.Load()
}

func (w *responseWriter) hasTrailers() bool {
	for _, k := range w.trailers {
		if len(w.header[k]) > 0 {
			return true
		}
	}
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.sendHead(false); err != nil {
		return err
	}
	st := w.st
	c := st.c
	// Whatever is buffered goes out now, or with the writer that waits.
	c.lockWrite()
	dead := st.dead.Load()
	err := c.unlockWrite()
	if dead {
		return st.writeErr()
	}
	return err
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

func (w *responseWriter) SetReadDeadline(t time.Time) error {
	w.st.setReadDeadline(t)
	return nil
}

func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.st.setWriteDeadline(t)
	return nil
}

// EnableFullDuplex is a no-op: an HTTP/2 handler may always read the
// request body while it writes the response.
func (w *responseWriter) EnableFullDuplex() error { return nil }

// finish ends the response after the handler returned.
func (w *responseWriter) finish() {
	st := w.st
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.contentLength >= 0 && w.written < w.contentLength && !w.isHEAD && !w.noBody {
		// A body cut short of its Content-Length: the client must not
		// take it as whole.
		w.st.c.resetStream(st.id, codeInternal, errShortBody)
		return
	}
	trailers := w.hasTrailers()
	if !w.sentHeader {
		if err := w.sendHead(true); err != nil || !trailers {
			return
		}
	} else if !trailers {
		_ = st.writeData(nil, true)
		return
	}
	c := st.c
	c.lockWrite()
	if !st.dead.Load() {
		c.hbuf.Reset()
		w.trailerFields()
		c.writeBlock(st.id, true)
	}
	// Before the flush, as in sendHead.
	c.mu.Lock()
	st.sendClosed = true
	c.mu.Unlock()
	_ = c.unlockWrite()
}

var errShortBody = errors.New("http2: response body shorter than its content-length")

// trailerFields encodes the response's trailers (wmu held): the declared
// fields and those named with http.TrailerPrefix.
func (w *responseWriter) trailerFields() {
	c := w.st.c
	for _, k := range w.trailers {
		if !httpguts.ValidTrailerHeader(k) {
			continue
		}
		for _, v := range w.header[k] {
			c.field(c.lower.get(k, strings.ToLower), v)
		}
	}
	for k, vv := range w.header {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok || name == "" || !httpguts.ValidTrailerHeader(http.CanonicalHeaderKey(name)) {
			continue
		}
		for _, v := range vv {
			c.field(strings.ToLower(name), v)
		}
	}
}

// writeData sends p as DATA frames, as the send windows allow; end ends
// the stream with the last one.
func (st *stream) writeData(p []byte, end bool) error {
	c := st.c
	for {
		c.mu.Lock()
		for {
			if st.aborted || c.closed {
				c.mu.Unlock()
				return st.writeErr()
			}
			if len(p) == 0 || st.sendWindow > 0 && c.sendWindow > 0 {
				break
			}
			st.boundWindowWaitLocked()
			c.sendCond.Wait()
		}
		st.windowWaitDoneLocked()
		// An empty frame needs no window, which may be negative after
		// the client shrank it.
		n := int64(0)
		if len(p) > 0 {
			n = min(int64(len(p)), st.sendWindow, c.sendWindow, int64(c.peerFrame))
		}
		st.sendWindow -= n
		c.sendWindow -= n
		last := end && n == int64(len(p))
		if last {
			st.sendClosed = true
		}
		shrinks := c.shrinks.Load()
		c.mu.Unlock()
		c.lockWrite()
		if st.dead.Load() {
			_ = c.unlockWrite()
			st.giveBack(n, last) // as in sendHead
			return st.writeErr()
		}
		if c.shrinks.Load() != shrinks {
			// A SETTINGS frame shrank the windows since the frame was
			// sized, and its ACK may be out: the client would hold this
			// frame to the new window. Sized again.
			_ = c.unlockWrite()
			st.giveBack(n, last)
			continue
		}
		c.wfr.WriteData(st.id, last, p[:n])
		if err := c.unlockWrite(); err != nil {
			return err
		}
		if p = p[n:]; len(p) == 0 {
			return nil
		}
	}
}

// giveBack returns the window a frame took that was not sent.
func (st *stream) giveBack(n int64, last bool) {
	c := st.c
	c.mu.Lock()
	st.sendWindow += n
	c.sendWindow += n
	if last {
		st.sendClosed = false
	}
	c.sendCond.Broadcast()
	c.mu.Unlock()
}

// writeErr is what a write to a stream that ended returns.
func (st *stream) writeErr() error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.wrExpired {
		return os.ErrDeadlineExceeded
	}
	if c.closed {
		return errConnClosed
	}
	return errStreamClosed
}

// encodeHead starts a header block in hbuf: :status and the fields of h
// meant for the client (wmu held). writeBlock sends it once the caller
// has added its own.
func (c *conn) encodeHead(status int, h http.Header) {
	c.hbuf.Reset()
	c.field(":status", statusText(status))
	for k, vv := range h {
		name := c.lower.get(k, strings.ToLower)
		switch name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			continue
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if name == "te" && v != "trailers" || !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			c.field(name, v)
		}
	}
}

func (c *conn) field(name, value string) {
	_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// writeBlock writes the header block in hbuf (wmu held).
func (c *conn) writeBlock(id uint32, end bool) {
	block := c.hbuf.Bytes()
	size := int(c.peerFrameSize())
	first := true
	for first || len(block) > 0 {
		n := min(len(block), size)
		frag, done := block[:n], n == len(block)
		if first {
			c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: done})
		} else {
			c.wfr.WriteContinuation(id, done, frag)
		}
		block, first = block[n:], false
	}
}

// writeHeadersOnly answers a stream that gets no handler with status.
func (c *conn) writeHeadersOnly(id uint32, status int) {
	c.lockWrite()
	c.hbuf.Reset()
	c.field(":status", statusText(status))
	c.field("content-length", "0")
	c.writeBlock(id, true)
	_ = c.unlockWrite()
}

func (c *conn) peerFrameSize() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerFrame
}

func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 206:
		return "206"
	case 301:
		return "301"
	case 302:
		return "302"
	case 304:
		return "304"
	case 400:
		return "400"
	case 404:
		return "404"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	return strconv.Itoa(code)
}
