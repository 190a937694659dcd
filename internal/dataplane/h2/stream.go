package h2

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"portico.dev/portico/internal/dataplane/reqctx"
	"portico.dev/portico/internal/dataplane/reqtarget"
)

// stream is one request and its response. The fields after the first
// group are under c.mu.
type stream struct {
	c   *conn
	id  uint32
	req *http.Request // &reqv
	// ctx is the request's context, cancelled through its Cancel only.
	ctx reqctx.Ctx
	w   responseWriter
	// reqv, url and body are the request's parts, held here so that a
	// stream costs one allocation for all of them; each stream has its
	// own (nothing is reused), so a handler may keep them past its return.
	reqv http.Request
	url  url.URL
	body requestBody
	// dead is set when the stream was reset or ended: writes under wmu
	// check it so that no frame follows a RST_STREAM. finalSent is set
	// once the final HEADERS went out; needsContinue while a 100
	// Continue is owed at the first body read.
	dead, finalSent, needsContinue atomic.Bool

	recvClosed  bool // the client ended its side (END_STREAM)
	sendClosed  bool // the response ended (END_STREAM sent)
	aborted     bool // reset either way, or the connection closed
	resetSent   bool
	resetRecv   bool // the client reset the stream (RST_STREAM)
	handlerDone bool
	removed     bool
	sendWindow  int64
	recvWindow  int32 // what the client may still send on the stream
	recvUnacked int32 // bytes the handler read, not yet given back
	declLen     int64 // the request's Content-Length, or -1
	gotLen      int64
	buf         []byte // request body bytes received, unread from off
	off         int
	bufp        *[]byte // buf's box from the server's pool, if any
	bodyErr     error   // what Read returns once buf is drained
	bodyCond    sync.Cond
	// trailer holds the request's trailer fields until Read reaches EOF,
	// where the declared ones are copied into req.Trailer.
	trailer               http.Header
	readTimer, writeTimer *time.Timer
	wrExpired             bool
	// windowBound: wDeadline is the bound of a wait for window
	// (boundWindowWaitLocked), not the handler's.
	windowBound             bool
	readDeadline, wDeadline time.Time
}

// onHeaders opens a stream, or takes a stream's trailers.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(codeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		return c.onTrailers(st, f)
	}
	if id <= c.maxClientID {
		ignore := c.goingAway && id > c.lastID || c.recentlyResetLocked(id)
		c.mu.Unlock()
		if ignore {
			// Past the GOAWAY's last stream (RFC 9113, 6.8), or trailers
			// the client sent before it saw the server's RST_STREAM
			// (5.1): ignored.
			return nil
		}
		// A connection error either way: the block was decoded, which
		// costs the server what ignoring it would cost the client
		// nothing. A request's block tries to open a stream with an id
		// that did not grow (PROTOCOL_ERROR, 5.1.1); a trailer block can
		// only be meant for a stream opened before, which is closed,
		// since below the highest id seen a stream that is not tracked
		// is closed (an idle one can only have a higher id): a block on
		// a closed stream is STREAM_CLOSED (5.1).
		if len(f.PseudoFields()) > 0 {
			return http2.ConnectionError(codeProtocol)
		}
		return http2.ConnectionError(codeStreamClose)
	}
	c.maxClientID = id
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: codeProtocol} // RFC 9113, 5.3.1
	}
	if c.goingAway || c.closed {
		c.mu.Unlock()
		return nil // past the GOAWAY's last stream: ignored
	}
	full := uint32(len(c.streams)) >= c.maxStreams
	c.mu.Unlock()
	if full {
		return http2.StreamError{StreamID: id, Code: codeRefused}
	}
	if f.Truncated {
		c.refuseRequest(id, http.StatusRequestHeaderFieldsTooLarge, f.StreamEnded())
		return nil
	}
	st := &stream{c: c, id: id, declLen: -1}
	st.bodyCond.L = &c.mu
	req, err := st.newRequest(f)
	if errors.Is(err, errBadTarget) {
		// As the HTTP/1 server answers a bad Host or method.
		c.refuseRequest(id, http.StatusBadRequest, f.StreamEnded())
		return nil
	}
	if err != nil {
		return http2.StreamError{StreamID: id, Code: codeProtocol, Cause: err}
	}
	st.req = req
	st.w.reset(st)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		st.ctx.Cancel(errConnClosed)
		return nil
	}
	st.sendWindow = int64(c.peerWindow)
	st.recvWindow = c.srv.streamWindow()
	if !c.settingsAcked {
		st.recvWindow = max(st.recvWindow, initialWindow)
	}
	if f.StreamEnded() {
		st.recvClosed, st.bodyErr = true, io.EOF
	}
	c.streams[id] = st
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.handlers.Add(1)
	c.mu.Unlock()
	c.srv.workers.Go(st)
	return nil
}

// refuseRequest answers a stream that gets no handler with status; a
// client that has a body to send is told not to (RST_STREAM NO_ERROR,
// RFC 9113, 8.1).
func (c *conn) refuseRequest(id uint32, status int, ended bool) {
	c.writeHeadersOnly(id, status)
	if !ended {
		c.resetStream(id, codeNo, errStreamClosed)
	}
}

// errBadTarget marks a request whose method or host no server should
// route on: answered 400.
var errBadTarget = errors.New("bad request target")

// newRequest makes the stream's request from its header block, checked as
// RFC 9113, 8.3 and 8.2.2 ask.
func (st *stream) newRequest(f *http2.MetaHeadersFrame) (*http.Request, error) {
	var method, scheme, path, authority string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":path":
			path = hf.Value
		case ":authority":
			authority = hf.Value
		default:
			return nil, fmt.Errorf("pseudo-header field %s", hf.Name)
		}
	}
	u := &st.url
	var err error
	switch {
	case method == "CONNECT":
		if scheme != "" || path != "" || authority == "" {
			return nil, errors.New("malformed CONNECT")
		}
		*u, path = url.URL{Host: authority}, authority
	case method == "" || scheme == "" || path == "":
		return nil, errors.New("missing pseudo-header field")
	case path == "*" && method == "OPTIONS":
		*u = url.URL{Path: "*"}
	case path[0] != '/':
		return nil, errors.New("malformed :path")
	default:
		if err = reqtarget.Parse(u, path); err != nil {
			return nil, fmt.Errorf("malformed :path: %w", err)
		}
	}
	header, err := st.c.requestHeader(f.RegularFields())
	if err != nil {
		return nil, err
	}
	if authority, err = requestAuthority(method, scheme, authority, header["Host"]); err != nil {
		return nil, err
	}
	delete(header, "Host")
	// Built here and copied into reqv with its context: WithContext,
	// inlined, copies it once more on the stack, not the heap.
	req := http.Request{Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: header, Host: authority, RequestURI: path, RemoteAddr: st.c.remote,
		TLS: st.c.tls, ContentLength: -1}
	if cl := header["Content-Length"]; len(cl) > 0 {
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if len(cl) > 1 || err != nil {
			return nil, errors.New("malformed content-length")
		}
		st.declLen, req.ContentLength = int64(n), int64(n)
	}
	if f.StreamEnded() {
		if st.declLen > 0 {
			return nil, errors.New("content-length without a body")
		}
		req.ContentLength, req.Body = 0, http.NoBody
	} else {
		st.body.st = st
		req.Body = &st.body
		if e := header["Expect"]; len(e) == 1 && strings.EqualFold(e[0], "100-continue") {
			st.needsContinue.Store(true)
		}
	}
	req.Trailer = declaredTrailer(header)
	st.ctx.Init(st.c.base)
	st.reqv = *req.WithContext(&st.ctx)
	return &st.reqv, nil
}

// requestAuthority checks the request's target fields as RFC 9113, 8.3.1
// asks, so that a handler routes on the host every server agrees on: a
// token for :method, a valid host in :authority (without userinfo for
// http and https), and a Host field, if any, that appears once and names
// the same host. It returns the request's host.
func requestAuthority(method, scheme, authority string, host []string) (string, error) {
	if !httpguts.ValidHeaderFieldName(method) {
		return "", fmt.Errorf("%w: malformed :method", errBadTarget)
	}
	switch {
	case len(host) > 1:
		return "", fmt.Errorf("%w: more than one host field", errBadTarget)
	case len(host) == 0:
	case authority == "":
		authority = host[0]
	case host[0] != authority:
		return "", fmt.Errorf("%w: host field unlike :authority", errBadTarget)
	}
	if !httpguts.ValidHostHeader(authority) {
		return "", fmt.Errorf("%w: malformed :authority", errBadTarget)
	}
	if (scheme == "http" || scheme == "https") && strings.IndexByte(authority, '@') >= 0 {
		return "", fmt.Errorf("%w: userinfo in :authority", errBadTarget)
	}
	return authority, nil
}

// requestHeader makes the request's header map from the regular fields,
// refusing the connection-specific ones (RFC 9113, 8.2.2). Field names
// are lowercase: the framer checked it.
func (c *conn) requestHeader(fields []hpackField) (http.Header, error) {
	h := make(http.Header, len(fields))
	// One array holds a value of each name: a name seen again appends
	// past its one-element slice, into an array of its own.
	vals := make([]string, 0, len(fields))
	var cookies []string
	for _, hf := range fields {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, fmt.Errorf("connection-specific field %s", hf.Name)
		case "te":
			if hf.Value != "trailers" {
				return nil, errors.New("te other than trailers")
			}
		case "cookie":
			// Split in several fields for compression (RFC 9113,
			// 8.2.3); one field for the handler.
			cookies = append(cookies, hf.Value)
			continue
		}
		k := c.canon.get(hf.Name, http.CanonicalHeaderKey)
		if vv, ok := h[k]; ok {
			h[k] = append(vv, hf.Value)
			continue
		}
		vals = append(vals, hf.Value)
		n := len(vals)
		h[k] = vals[n-1 : n : n]
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	return h, nil
}

// nameCache remembers what a conversion makes of the field names a
// connection sees again and again: canonical keys of request fields (read
// loop only), lowercase names of response fields (under wmu). It keeps 256
// names of 64 bytes at most: the names every request or response repeats
// are short, and the peer picks the others while the cache lives as long
// as the connection.
type nameCache map[string]string

const maxCachedNames, maxCachedName = 256, 64

func (nc nameCache) get(name string, conv func(string) string) string {
	if v, ok := nc[name]; ok {
		return v
	}
	v := conv(name)
	if len(nc) < maxCachedNames && len(name) <= maxCachedName {
		nc[name] = v
	}
	return v
}

// declaredTrailer is the request's Trailer map: the fields its Trailer
// field announces, as net/http makes it.
func declaredTrailer(h http.Header) http.Header {
	vv, ok := h["Trailer"]
	if !ok {
		return nil
	}
	var t http.Header
	for _, v := range vv {
		for key := range strings.SplitSeq(v, ",") {
			key = http.CanonicalHeaderKey(strings.TrimSpace(key))
			switch key {
			case "", "Transfer-Encoding", "Trailer", "Content-Length":
				continue
			}
			if t == nil {
				t = http.Header{}
			}
			t[key] = nil
		}
	}
	delete(h, "Trailer")
	return t
}

// onTrailers takes a header block on a stream that is still tracked: the
// request's trailers, or a block on a stream that is closed or half-closed
// (remote), which RFC 9113, 5.1 makes STREAM_CLOSED.
func (c *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case st.resetSent:
		if st.recvClosed || st.resetRecv || !f.StreamEnded() {
			// More than the one trailer block that may have been in
			// flight when the server's RST_STREAM left: a stream error
			// would be dropped (the stream was reset already), and
			// ignoring block after block lets a client make the server
			// decode them for nothing.
			return http2.ConnectionError(codeStreamClose)
		}
		// Sent before the client saw the RST_STREAM: ignored, once; the
		// client's side is closed by them.
		st.recvClosed = true
		return nil
	case st.recvClosed && st.sendClosed:
		// Closed after END_STREAM both ways: a connection error (RFC
		// 9113, 5.1), as on a stream no longer tracked.
		return http2.ConnectionError(codeStreamClose)
	case st.resetRecv || st.recvClosed:
		// Closed by the client's RST_STREAM (a stream error, 5.1), or
		// half-closed (remote) (the same, 5.1).
		return http2.StreamError{StreamID: st.id, Code: codeStreamClose}
	case !f.StreamEnded():
		return http2.ConnectionError(codeProtocol)
	case len(f.PseudoFields()) > 0 || f.Truncated:
		return http2.StreamError{StreamID: st.id, Code: codeProtocol}
	case st.declLen >= 0 && st.gotLen != st.declLen:
		return http2.StreamError{StreamID: st.id, Code: codeProtocol, Cause: errors.New("content-length mismatch")}
	}
	for _, hf := range f.RegularFields() {
		k := c.canon.get(hf.Name, http.CanonicalHeaderKey)
		if !httpguts.ValidTrailerHeader(k) {
			return http2.StreamError{StreamID: st.id, Code: codeProtocol}
		}
		if st.trailer == nil {
			st.trailer = http.Header{}
		}
		st.trailer[k] = append(st.trailer[k], hf.Value)
	}
	st.endRecvLocked()
	return nil
}

// endRecvLocked marks the client's side done (c.mu held).
func (st *stream) endRecvLocked() {
	st.recvClosed = true
	if st.bodyErr == nil {
		st.bodyErr = io.EOF
	}
	st.bodyCond.Broadcast()
	st.c.maybeRemoveLocked(st)
}

func (c *conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int32(f.Length)
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(codeFlow)
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.recvClosed || st.aborted || st.handlerDone || st.bodyErr != nil {
		// Nobody reads these bytes: the connection gets them back.
		err := c.unreadDataLocked(st, id)
		if err == nil && st != nil && !st.recvClosed && f.StreamEnded() {
			st.recvClosed = true // its body was closed or timed out
			c.maybeRemoveLocked(st)
		}
		inc := c.creditLocked(n)
		c.mu.Unlock()
		c.sendWindowUpdates(0, inc)
		return err
	}
	if n > st.recvWindow {
		inc := c.creditLocked(n)
		c.mu.Unlock()
		c.sendWindowUpdates(0, inc)
		return http2.StreamError{StreamID: id, Code: codeFlow}
	}
	st.recvWindow -= n
	data := f.Data()
	// Padding is nobody's to read: given back at once.
	var sinc, cinc uint32
	if pad := n - int32(len(data)); pad > 0 {
		sinc, cinc = st.creditLocked(pad), c.creditLocked(pad)
	}
	st.gotLen += int64(len(data))
	if st.declLen >= 0 && st.gotLen > st.declLen {
		// The stream is reset: nobody reads these bytes either.
		cinc += c.creditLocked(int32(len(data)))
		c.mu.Unlock()
		c.sendWindowUpdates(0, cinc)
		return http2.StreamError{StreamID: id, Code: codeProtocol, Cause: errors.New("body beyond content-length")}
	}
	if len(data) > 0 {
		st.appendBodyLocked(data)
		st.bodyCond.Signal()
	}
	var err error
	if f.StreamEnded() {
		if st.declLen >= 0 && st.gotLen != st.declLen {
			err = http2.StreamError{StreamID: id, Code: codeProtocol, Cause: errors.New("body short of content-length")}
		} else {
			st.endRecvLocked()
			sinc = 0
		}
	}
	c.mu.Unlock()
	c.sendWindowUpdates(id, sinc)
	c.sendWindowUpdates(0, cinc)
	return err
}

// unreadDataLocked tells what a DATA frame for stream id that nobody
// reads is (c.mu held; st is the stream, nil when it is not tracked): nil
// when it is to be ignored, else the error to answer it with.
//
// RFC 9113: DATA on an idle stream is a connection error PROTOCOL_ERROR
// (5.1); on a stream that is neither open nor half-closed (local) it is a
// stream error STREAM_CLOSED (6.1), except on a stream the server reset,
// whose frames in flight are ignored (5.1, closed), and past the last
// stream of a GOAWAY (6.8). Below the highest id the client used, a stream
// that is not tracked is closed (an idle one can only have a higher id,
// 5.1.1): that takes no memory of closed streams. The streams the server
// reset are remembered for a while only (resetIDs): DATA on an older one
// gets the STREAM_CLOSED reset too, which costs its client nothing, the
// stream being over already.
func (c *conn) unreadDataLocked(st *stream, id uint32) error {
	switch {
	case st == nil && id > c.maxClientID:
		return http2.ConnectionError(codeProtocol)
	case st == nil:
		if c.goingAway && id > c.lastID || c.resetLatelyLocked(id) {
			return nil
		}
		return http2.StreamError{StreamID: id, Code: codeStreamClose}
	case st.resetSent:
		return nil
	case st.resetRecv || st.recvClosed:
		// Reset by the client, or half-closed (remote).
		return http2.StreamError{StreamID: id, Code: codeStreamClose}
	}
	// Open still, with a body that nobody reads any more (its handler
	// returned or closed it): taken and dropped.
	return nil
}

// appendBodyLocked adds request body bytes to buf (c.mu held). The buffer
// holds the unread bytes only, which the stream window bounds: the read
// part is dropped by sliding the rest down when that copies little, as
// bytes.Buffer does, else the unread bytes move to a larger buffer.
func (st *stream) appendBodyLocked(p []byte) {
	if st.bufp == nil {
		st.bufp = st.c.srv.bodyBuf()
		st.buf, st.off = (*st.bufp)[:0], 0
	}
	if len(st.buf)+len(p) > cap(st.buf) {
		unread := len(st.buf) - st.off
		if unread+len(p) <= cap(st.buf)/2 {
			st.buf = st.buf[:copy(st.buf, st.buf[st.off:])]
		} else {
			nb := make([]byte, unread, max(2*cap(st.buf), unread+len(p)))
			copy(nb, st.buf[st.off:])
			st.buf = nb
		}
		st.off = 0
	}
	st.buf = append(st.buf, p...)
}

// releaseBufLocked hands a drained or dropped body buffer back to the
// server's pool (c.mu held): a stream that waits with nothing unread
// holds no buffer.
func (st *stream) releaseBufLocked() {
	if st.bufp != nil && cap(st.buf) <= maxPooledBody {
		*st.bufp = st.buf[:0]
		st.c.srv.bodyBufs.Put(st.bufp)
	}
	st.buf, st.bufp, st.off = nil, nil, 0
}

// creditLocked gives n bytes back to the connection's receive window; it
// returns the WINDOW_UPDATE increment to send, once enough is owed.
func (c *conn) creditLocked(n int32) uint32 {
	c.recvUnacked += n
	if c.recvUnacked < c.srv.connWindow()/4 {
		return 0
	}
	inc := c.recvUnacked
	c.recvWindow += inc
	c.recvUnacked = 0
	return uint32(inc)
}

func (st *stream) creditLocked(n int32) uint32 {
	if st.recvClosed || st.aborted {
		return 0
	}
	st.recvUnacked += n
	if st.recvUnacked < st.c.srv.streamWindow()/4 {
		return 0
	}
	inc := st.recvUnacked
	st.recvWindow += inc
	st.recvUnacked = 0
	return uint32(inc)
}

// sendWindowUpdates writes a WINDOW_UPDATE of inc for stream id (0: the
// connection), if inc is not zero.
func (c *conn) sendWindowUpdates(id uint32, inc uint32) {
	if inc == 0 {
		return
	}
	c.lockWrite()
	c.wfr.WriteWindowUpdate(id, inc)
	_ = c.unlockWrite()
}

// abortLocked ends the stream: its body reads and writes fail with cause
// and its context is cancelled (c.mu held).
func (st *stream) abortLocked(cause error) {
	if st.aborted {
		return
	}
	st.aborted = true
	st.dead.Store(true)
	if st.bodyErr == nil || st.bodyErr == io.EOF && st.off < len(st.buf) {
		st.bodyErr = cause
	}
	st.bodyCond.Broadcast()
	st.c.sendCond.Broadcast()
	st.ctx.Cancel(cause)
}

func (st *stream) stopTimers() {
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if st.writeTimer != nil {
		st.writeTimer.Stop()
	}
}

// Run runs the handler, on a worker of the server's pool (a
// workers.Task). A panic is recovered here; a runtime.Goexit still
// finishes the stream, and then ends the worker.
func (st *stream) Run() {
	c := st.c
	returned := false
	defer func() {
		v := recover()
		if !returned && v == nil {
			// runtime.Goexit: finish the stream; the goroutine goes on
			// ending after this.
			st.finish(false)
			return
		}
		if v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log().Error("panic serving an HTTP/2 stream", zap.String("remote", c.remote), zap.Any("panic", v), zap.ByteString("stack", buf))
			}
			st.finish(false)
		}
	}()
	c.srv.Handler.ServeHTTP(&st.w, st.req)
	st.finish(true)
	returned = true
}

var errAborted = errors.New("http2: handler aborted the stream")

// finish ends the response after the handler returned: the rest of it
// is written (when ok), the unread body given back, the stream forgotten.
func (st *stream) finish(ok bool) {
	c := st.c
	if ok {
		st.w.finish()
	} else {
		c.resetStream(st.id, codeInternal, errAborted)
	}
	c.srv.putHeldBuf(st.w.heldp)
	st.w.held, st.w.heldp = nil, nil
	c.putHeaderMap(st.w.header)
	st.w.header = nil
	c.mu.Lock()
	st.handlerDone = true
	unread := int32(len(st.buf) - st.off)
	st.releaseBufLocked()
	cinc := c.creditLocked(unread)
	// Our side closed while the client's is open: RST_STREAM NO_ERROR
	// tells it to stop sending the body (RFC 9113, 8.1).
	stopBody := st.sendClosed && !st.recvClosed && !st.aborted
	if stopBody {
		c.noteResetLocked(st.id)
	}
	st.abortLocked(errStreamClosed)
	c.maybeRemoveLocked(st)
	c.mu.Unlock()
	if stopBody {
		c.writeControlFromHandler(st.id, codeNo)
	}
	c.sendWindowUpdates(0, cinc)
	c.handlers.Done()
}

// writeControlFromHandler writes RST_STREAM from a handler's goroutine.
func (c *conn) writeControlFromHandler(id uint32, code http2.ErrCode) {
	c.lockWrite()
	c.wfr.WriteRSTStream(id, code)
	_ = c.unlockWrite()
}

// requestBody is a stream's request body.
type requestBody struct{ st *stream }

func (b *requestBody) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	if st.needsContinue.Load() && st.needsContinue.Swap(false) {
		st.sendContinue()
	}
	c.mu.Lock()
	for st.off == len(st.buf) && st.bodyErr == nil {
		st.bodyCond.Wait()
	}
	if st.off == len(st.buf) {
		err := st.bodyErr
		if err == io.EOF && st.trailer != nil && st.req.Trailer != nil {
			for k, vv := range st.trailer {
				if _, ok := st.req.Trailer[k]; ok {
					st.req.Trailer[k] = vv
				}
			}
			st.trailer = nil
		}
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, st.buf[st.off:])
	st.off += n
	if st.off == len(st.buf) {
		st.releaseBufLocked()
	}
	sinc, cinc := st.creditLocked(int32(n)), c.creditLocked(int32(n))
	c.mu.Unlock()
	c.sendWindowUpdates(st.id, sinc)
	c.sendWindowUpdates(0, cinc)
	return n, nil
}

func (b *requestBody) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	if st.bodyErr == nil {
		st.bodyErr = errBodyClosed
	}
	unread := int32(len(st.buf) - st.off)
	st.releaseBufLocked()
	cinc := c.creditLocked(unread)
	c.mu.Unlock()
	c.sendWindowUpdates(0, cinc)
	return nil
}

// sendContinue tells a client that waits to send the body to go on,
// unless the answer went out already.
func (st *stream) sendContinue() {
	c := st.c
	c.lockWrite()
	if !st.dead.Load() && !st.finalSent.Load() {
		c.hbuf.Reset()
		c.field(":status", "100")
		c.writeBlock(st.id, false)
	}
	_ = c.unlockWrite()
}

var errBodyClosed = errors.New("http2: request body closed")

// setReadDeadline bounds the wait for request body bytes: past it, Read
// returns what was received and then fails for good. The stream lives on:
// the handler may still answer (408, say).
func (st *stream) setReadDeadline(t time.Time) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	st.readDeadline = t
	if t.IsZero() || st.aborted || st.handlerDone {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		st.expireReadLocked()
		return
	}
	st.readTimer = time.AfterFunc(d, func() {
		c.mu.Lock()
		if st.readDeadline.Equal(t) {
			st.expireReadLocked()
		}
		c.mu.Unlock()
	})
}

func (st *stream) expireReadLocked() {
	if st.bodyErr == nil {
		st.bodyErr = fmt.Errorf("%w", os.ErrDeadlineExceeded)
		st.bodyCond.Broadcast()
	}
}

// setWriteDeadline bounds the response: past it, a blocked Write fails
// and the stream is reset.
func (st *stream) setWriteDeadline(t time.Time) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.writeTimer != nil {
		st.writeTimer.Stop()
	}
	st.wrExpired, st.wDeadline, st.windowBound = false, t, false
	if t.IsZero() || st.aborted || st.handlerDone {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		st.wrExpired = true
		go st.writeTimeout(t)
		return
	}
	st.writeTimer = time.AfterFunc(d, func() { st.writeTimeout(t) })
}

// boundWindowWaitLocked bounds a wait for flow-control window by the
// server's WriteByteTimeout when nothing else bounds it (c.mu held): a
// client that gives no window is one that does not read, and once the
// handler has returned no deadline of its own would end the wait (a
// client announcing a window of 0 held its streams and their handlers for
// ever). The bound is per wait: a response that moves, however slowly,
// is not cut by it.
func (st *stream) boundWindowWaitLocked() {
	d := st.c.srv.WriteByteTimeout
	if d <= 0 || !st.wDeadline.IsZero() || st.windowBound {
		return
	}
	st.windowBound = true
	t := time.Now().Add(d)
	st.wDeadline = t
	st.writeTimer = time.AfterFunc(d, func() { st.writeTimeout(t) })
}

// windowWaitDoneLocked lifts the bound boundWindowWaitLocked set, once the
// window came (c.mu held).
func (st *stream) windowWaitDoneLocked() {
	if !st.windowBound {
		return
	}
	st.windowBound = false
	st.writeTimer.Stop()
	st.wDeadline = time.Time{}
}

func (st *stream) writeTimeout(t time.Time) {
	c := st.c
	c.mu.Lock()
	if !st.wDeadline.Equal(t) || st.aborted || st.sendClosed {
		c.mu.Unlock()
		return
	}
	st.wrExpired = true
	c.sendCond.Broadcast()
	c.mu.Unlock()
	c.resetStream(st.id, codeInternal, os.ErrDeadlineExceeded)
}
