package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"portico.dev/portico/internal/dataplane/httpdate"
)

// Error codes (RFC 9113, section 7).
const (
	codeNo          = http2.ErrCodeNo
	codeProtocol    = http2.ErrCodeProtocol
	codeInternal    = http2.ErrCodeInternal
	codeFlow        = http2.ErrCodeFlowControl
	codeStreamClose = http2.ErrCodeStreamClosed
	codeFrameSize   = http2.ErrCodeFrameSize
	codeRefused     = http2.ErrCodeRefusedStream
	codeCancel      = http2.ErrCodeCancel
)

const (
	clientPreface = http2.ClientPreface
	// initialWindow is every window's size before SETTINGS change it.
	initialWindow = 65535
	maxWindow     = 1<<31 - 1
	// defaultPeerFrameSize is the largest frame the client takes until
	// its SETTINGS say otherwise.
	defaultPeerFrameSize = 16384
	writeBufferSize      = 16 << 10
)

// maxKnownCode is the highest error code RFC 9113 defines.
const maxKnownCode = http2.ErrCodeHTTP11Required

// clientGoneError is a GOAWAY from the client with an error code: it
// ends the connection at once.
type clientGoneError struct{ code http2.ErrCode }

func (e clientGoneError) Error() string { return fmt.Sprintf("client went away: %v", e.code) }

var (
	errServerClosed = errors.New("http2: server closed")
	errConnClosed   = errors.New("http2: client connection closed")
	errStreamReset  = ErrStreamReset
	errStreamClosed = errors.New("http2: stream closed")
)

// ErrStreamReset is the cause of a request's context when its client
// reset the stream: what tells a client that gave up on its answer from
// one whose connection went away.
var ErrStreamReset = errors.New("http2: stream reset by the client")

// conn is one HTTP/2 connection.
type conn struct {
	srv *Server
	// maxStreams and idle are the Server's MaxConcurrentStreams and
	// IdleTimeout, or what ServeConnWith set for this connection.
	maxStreams uint32
	idle       time.Duration
	nc         net.Conn
	remote     string
	tls        *tls.ConnectionState
	base       context.Context
	br         *bufio.Reader
	fr         *http2.Framer
	hb         headerBlock // the header blocks fr reads (readFrame)

	// The write side, under wmu: frames go to bw through wfr; henc
	// encodes response fields into hbuf. writers counts the goroutines
	// in or waiting for a write section: the last one out flushes.
	wmu     sync.Mutex
	writers atomic.Int32
	bw      *bufio.Writer
	wfr     *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	werr    error
	lower   nameCache      // response field names (under wmu)
	canon   nameCache      // request header keys (read loop only)
	date    httpdate.Cache // under wmu
	// ctlPending is set when the read loop wrote a control frame it did
	// not flush because more input was buffered (wmu).
	ctlPending bool

	// The streams and windows, under mu.
	mu          sync.Mutex
	sendCond    sync.Cond // the connection's send window grew
	streams     map[uint32]*stream
	maxClientID uint32
	goingAway   bool
	lastID      uint32 // the last stream taken, once going away
	closed      bool
	closeErr    error
	sendWindow  int64
	peerWindow  int32 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	// shrinks counts the SETTINGS frames that shrank the stream windows
	// or the frame size (written under mu): a DATA frame sized before one is sized again
	// (writeData).
	shrinks     atomic.Uint32
	peerFrame   uint32 // the client's SETTINGS_MAX_FRAME_SIZE
	recvWindow  int32  // what the client may still send on the connection
	recvUnacked int32  // bytes read by handlers, not yet given back
	idleTimer   *time.Timer
	// settingsAcked is set once the client took the server's SETTINGS:
	// before, it may send a stream the protocol's initial window.
	settingsAcked bool
	// resetIDs are the last streams the server reset, whose frames in
	// flight are ignored (RFC 9113, 5.1); resetNext is the next slot.
	resetIDs  [32]uint32
	resetNext int
	// lingering is set when the read loop closes the socket itself,
	// after a GOAWAY (linger).
	lingering bool
	// writeBound, when not zero, is the time (Unix ns) past which no
	// socket write may block: set once the connection is closing, so that
	// a client that does not read cannot hold it open.
	writeBound atomic.Int64
	handlers   sync.WaitGroup
	done       chan struct{}

	// hmaps are response header maps of finished streams, cleared, for
	// the next streams' responses (under hmu): a map and its first group
	// are two allocations a stream.
	hmu   sync.Mutex
	hmaps []http.Header
}

// Bounds of the reused header maps: how many a connection keeps, and the
// most fields a map may have held to be kept (a map keeps the room it grew
// to).
const (
	maxHeaderMaps      = 32
	maxHeaderMapFields = 32
)

func (c *conn) headerMap() http.Header {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if n := len(c.hmaps); n > 0 {
		h := c.hmaps[n-1]
		c.hmaps[n-1] = nil
		c.hmaps = c.hmaps[:n-1]
		return h
	}
	return http.Header{}
}

// putHeaderMap keeps h, whose response is over, for another stream.
func (c *conn) putHeaderMap(h http.Header) {
	if h == nil || len(h) > maxHeaderMapFields {
		return
	}
	clear(h)
	c.hmu.Lock()
	if len(c.hmaps) < maxHeaderMaps {
		c.hmaps = append(c.hmaps, h)
	}
	c.hmu.Unlock()
}

func newConn(s *Server, ctx context.Context, nc net.Conn) *conn {
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	c := &conn{srv: s, nc: nc, base: ctx, remote: nc.RemoteAddr().String(),
		streams: map[uint32]*stream{}, sendWindow: initialWindow,
		peerWindow: initialWindow, peerFrame: defaultPeerFrameSize,
		recvWindow: s.connWindow(), done: make(chan struct{}), lower: nameCache{}, canon: nameCache{}}
	c.sendCond.L = &c.mu
	// A *tls.Conn, or a wrapper of one that tells its state.
	if tc, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	c.br = bufio.NewReaderSize(nc, 16<<10)
	c.bw = bufio.NewWriterSize(connWriter{c}, writeBufferSize)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetMaxReadFrameSize(s.maxFrameSize())
	c.fr.MaxHeaderListSize = s.maxHeaderBytes()
	c.hb.init(s.maxHeaderBytes())
	c.wfr = http2.NewFramer(c.bw, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// connWriter is what bw writes to: each write must move within the
// WriteByteTimeout; a failed one closes the connection, which ends the
// read loop and every stream.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	c := w.c
	if d := c.srv.WriteByteTimeout; d > 0 {
		b := c.writeBound.Load()
		_ = c.nc.SetWriteDeadline(boundedDeadline(time.Now().Add(d), b))
		if b2 := c.writeBound.Load(); b2 != b {
			// bindWrites ran meanwhile: its deadline stands.
			_ = c.nc.SetWriteDeadline(boundedDeadline(time.Now().Add(d), b2))
		}
	}
	n, err := c.nc.Write(p)
	if err != nil {
		// wmu is held here; close takes mu, which is never held while
		// waiting for wmu.
		c.close(fmt.Errorf("writing to the client: %w", err))
	}
	return n, err
}

func boundedDeadline(t time.Time, bound int64) time.Time {
	if bound != 0 && bound < t.UnixNano() {
		return time.Unix(0, bound)
	}
	return t
}

// bindWrites bounds every socket write from now on to d: the connection
// is closing and has nothing left that deserves waiting for a client
// that does not read. A write blocked already fails at the bound too.
func (c *conn) bindWrites(d time.Duration) {
	t := time.Now().Add(d)
	if b := c.writeBound.Load(); b != 0 && b <= t.UnixNano() {
		return
	}
	c.writeBound.Store(t.UnixNano())
	_ = c.nc.SetWriteDeadline(t)
}

// serve runs the read loop, then waits for the handlers.
func (c *conn) serve() {
	defer func() {
		c.handlers.Wait()
		c.nc.Close()
	}()
	if err := c.readPreface(); err != nil {
		c.srv.log().Debug("http2 preface", zap.String("remote", c.remote), zap.Error(err))
		c.goAwayAndClose(codeProtocol, err)
		c.linger()
		return
	}
	if d := c.idle; d > 0 {
		c.mu.Lock()
		c.idleTimer = time.AfterFunc(d, c.idleExpired)
		c.mu.Unlock()
	}
	err := c.readLoop()
	if errors.Is(err, http2.ErrFrameTooLarge) {
		err = http2.ConnectionError(codeFrameSize)
	}
	var ce http2.ConnectionError
	var gone clientGoneError
	switch {
	case errors.As(err, &ce):
		c.goAwayAndClose(http2.ErrCode(ce), err)
		c.linger()
	case errors.As(err, &gone):
		// The client's streams end now; the socket closes once the
		// client is done sending, as after a connection error, so that
		// frames it sent after its GOAWAY do not reset the connection.
		c.goAwayAndClose(codeNo, err)
		c.linger()
	default:
		c.close(err)
	}
}

// readPreface reads the client's preface and its SETTINGS, and sends the
// server's.
func (c *conn) readPreface() error {
	c.setReadDeadline(time.Now().Add(c.srv.prefaceTimeout()))
	defer c.setReadDeadline(time.Time{})
	buf := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return fmt.Errorf("reading the preface: %w", err)
	}
	if string(buf) != clientPreface {
		return errors.New("bad client preface")
	}
	s := c.srv
	c.lockWrite()
	c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: s.maxFrameSize()},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.maxStreams},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: s.maxHeaderBytes()},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(s.streamWindow())},
	)
	if d := s.connWindow() - initialWindow; d > 0 {
		c.wfr.WriteWindowUpdate(0, uint32(d))
	}
	if err := c.unlockWrite(); err != nil {
		return err
	}
	f, err := c.readFrame()
	if err != nil {
		return fmt.Errorf("reading the client's settings: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return http2.ConnectionError(codeProtocol)
	}
	return c.onSettings(sf)
}

// setReadDeadline sets the preface's read deadline, unless the
// connection lingers: the linger's own deadline then stands (a Shutdown
// during the preface must not leave the read loop unbounded).
func (c *conn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lingering {
		_ = c.nc.SetReadDeadline(t)
	}
}

// readLoop reads and handles frames until an error.
func (c *conn) readLoop() error {
	for {
		if !c.frameBuffered() {
			c.flushControl()
		}
		f, err := c.readFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A malformed header block still opened its stream.
				if err := c.sawStreamID(se.StreamID); err != nil {
					return err
				}
				c.resetStream(se.StreamID, se.Code, serverReset(se))
				continue
			}
			return err
		}
		if err := c.onFrame(f); err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code, serverReset(se))
				continue
			}
			return err
		}
	}
}

// sawStreamID records a client stream id the client opened.
func (c *conn) sawStreamID(id uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.maxClientID {
		if id%2 == 0 {
			return http2.ConnectionError(codeProtocol)
		}
		c.maxClientID = id
	}
	return nil
}

func (c *conn) onFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			c.mu.Lock()
			c.settingsAcked = true
			c.mu.Unlock()
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.writeControl(func() { c.wfr.WritePing(true, f.Data) })
		}
		return nil
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.GoAwayFrame:
		// An unknown code must not trigger any special behaviour (RFC
		// 9113, 7): it is taken as NO_ERROR.
		if f.ErrCode != codeNo && f.ErrCode <= maxKnownCode {
			return clientGoneError{f.ErrCode}
		}
		c.goAway(codeNo)
		return nil
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			// RFC 9113, 5.3.1: a stream cannot depend on itself.
			return http2.StreamError{StreamID: f.StreamID, Code: codeProtocol}
		}
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(codeProtocol)
	case *http2.HeadersFrame:
		// readFrame decodes every header block: never here.
		return http2.ConnectionError(codeInternal)
	default:
		// PRIORITY_UPDATE and unknown frames carry nothing the server
		// acts on.
		return nil
	}
}

// maxSettings bounds the entries of a SETTINGS frame: there are six
// settings; a frame of thousands only costs the server time.
const maxSettings = 100

// onSettings applies the last value of each setting once: a SETTINGS
// frame repeating INITIAL_WINDOW_SIZE must not walk every stream per
// entry.
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.NumSettings() > maxSettings {
		return http2.ConnectionError(codeProtocol)
	}
	var window, frame, table uint32
	var setWindow, setFrame, setTable bool
	for i := range f.NumSettings() {
		st := f.Setting(i)
		if err := st.Valid(); err != nil {
			return err
		}
		switch st.ID {
		case http2.SettingInitialWindowSize:
			window, setWindow = st.Val, true
		case http2.SettingMaxFrameSize:
			frame, setFrame = st.Val, true
		case http2.SettingHeaderTableSize:
			table, setTable = st.Val, true
		}
	}
	// The new values take effect and the ACK is written in one write
	// section: a DATA frame the new window allows is written after the
	// ACK, never before it, so a client that waits for its ACK before
	// reading on sees every frame the change released (RFC 9113, 6.5.3).
	var err error
	c.writeControl(func() {
		if setWindow {
			if err = c.setPeerWindow(int32(window)); err != nil {
				return
			}
		}
		if setFrame {
			c.mu.Lock()
			if frame < c.peerFrame {
				c.shrinks.Add(1)
			}
			c.peerFrame = frame
			c.mu.Unlock()
		}
		if setTable {
			c.henc.SetMaxDynamicTableSizeLimit(table)
		}
		c.wfr.WriteSettingsAck()
	})
	return err
}

// setPeerWindow applies a new SETTINGS_INITIAL_WINDOW_SIZE to every
// stream's send window (RFC 9113, 6.9.2).
func (c *conn) setPeerWindow(v int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := int64(v) - int64(c.peerWindow)
	c.peerWindow = v
	if d < 0 {
		c.shrinks.Add(1)
	}
	for _, st := range c.streams {
		st.sendWindow += d
		if st.sendWindow > maxWindow {
			return http2.ConnectionError(codeFlow)
		}
	}
	c.sendCond.Broadcast()
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(codeFlow)
		}
		c.sendCond.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return http2.ConnectionError(codeProtocol) // an idle stream
		}
		return nil // closed: frames in flight are fine
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: codeFlow}
	}
	c.sendCond.Broadcast()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	if f.StreamID > c.maxClientID {
		c.mu.Unlock()
		return http2.ConnectionError(codeProtocol)
	}
	st := c.streams[f.StreamID]
	if st != nil {
		st.resetRecv = true
		st.abortLocked(errStreamReset)
		c.maybeRemoveLocked(st)
	}
	c.mu.Unlock()
	return nil
}

// resetStream sends RST_STREAM for id and ends the stream, if open.
func (c *conn) resetStream(id uint32, code http2.ErrCode, cause error) {
	c.mu.Lock()
	st := c.streams[id]
	if st != nil {
		if st.resetSent {
			c.mu.Unlock()
			return
		}
		st.resetSent = true
		st.dead.Store(true)
		st.abortLocked(cause)
		c.maybeRemoveLocked(st)
	}
	c.noteResetLocked(id)
	c.mu.Unlock()
	// Any goroutine resets streams: a write section of its own.
	c.lockWrite()
	c.wfr.WriteRSTStream(id, code)
	_ = c.unlockWrite()
}

// serverReset is the cause a handler's context is cancelled with when the
// server resets its stream for what the client sent (a malformed block, a
// body past its content-length): the client broke the stream, it did not
// reset it, and the log must say which.
func serverReset(se http2.StreamError) error {
	return fmt.Errorf("http2: stream reset by the server: %w", se)
}

// noteResetLocked remembers that the server reset stream id (c.mu held).
func (c *conn) noteResetLocked(id uint32) {
	c.resetIDs[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % len(c.resetIDs)
}

// recentlyResetLocked tells whether the server reset stream id lately,
// and forgets it (c.mu held): a stream's client sends one header block
// after its request's, its trailers, so a second one on a reset stream is
// an attack (decoding it costs, ignoring it costs nothing to the client)
// and closes the connection as any frame on a closed stream does.
func (c *conn) recentlyResetLocked(id uint32) bool {
	for i, r := range c.resetIDs {
		if r == id {
			c.resetIDs[i] = 0
			return true
		}
	}
	return false
}

// resetLatelyLocked tells whether the server reset stream id lately
// (c.mu held), without forgetting it: DATA frames in flight may be many.
func (c *conn) resetLatelyLocked(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id {
			return true
		}
	}
	return false
}

// maybeRemoveLocked forgets st once its handler is done and the stream
// is closed both ways or reset (c.mu held).
func (c *conn) maybeRemoveLocked(st *stream) {
	if !st.handlerDone || st.removed {
		return
	}
	if !st.aborted && !(st.sendClosed && st.recvClosed) {
		return
	}
	st.removed = true
	st.stopTimers()
	delete(c.streams, st.id)
	if len(c.streams) > 0 {
		return
	}
	if c.goingAway {
		go c.gracefulClose(errServerClosed)
		return
	}
	if c.idleTimer != nil {
		c.idleTimer.Reset(c.idle)
	}
}

func (c *conn) idleExpired() {
	c.mu.Lock()
	idle := len(c.streams) == 0 && !c.closed
	c.mu.Unlock()
	if idle {
		c.goAway(codeNo)
	}
}

// goAway starts a graceful close: no stream after the last one taken;
// the connection closes when the streams taken are done.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.mu.Unlock()
		return
	}
	c.goingAway, c.lastID = true, c.maxClientID
	last, empty := c.lastID, len(c.streams) == 0
	if empty {
		// No stream can open now: the GOAWAY and the close need not
		// wait for a client that does not read (the read loop may be
		// stuck writing its PING answers).
		c.bindWrites(time.Second)
	}
	c.mu.Unlock()
	c.lockWrite()
	c.wfr.WriteGoAway(last, code, nil)
	_ = c.unlockWrite()
	if empty {
		c.gracefulClose(errServerClosed)
	}
}

// gracefulClose ends a connection that has no stream left: what is
// buffered goes out, and the read loop reads on for a second at most (or
// until the client closes, as it does after a GOAWAY) before the socket
// closes, so that no unread byte resets the connection before the
// client has read the last answers.
func (c *conn) gracefulClose(err error) {
	c.bindWrites(time.Second)
	c.wmu.Lock()
	if c.werr == nil && c.bw.Buffered() > 0 {
		c.werr = c.bw.Flush()
	}
	c.wmu.Unlock()
	c.mu.Lock()
	c.lingering = true
	c.mu.Unlock()
	c.close(err)
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
}

// goAwayAndClose sends GOAWAY with code and ends the connection; the
// read loop, lingering, closes the socket itself (linger).
func (c *conn) goAwayAndClose(code http2.ErrCode, cause error) {
	c.mu.Lock()
	last := c.maxClientID
	closed := c.closed
	c.goingAway, c.lingering = true, true
	c.mu.Unlock()
	if !closed {
		// Bounded: a client that does not read gets no GOAWAY.
		c.bindWrites(time.Second)
		c.lockWrite()
		c.wfr.WriteGoAway(last, code, nil)
		_ = c.unlockWrite()
	}
	c.close(cause)
}

// linger reads and drops what the client still sends, for a second at
// most, before the socket closes: closing it with unread bytes would
// reset the connection, and the client could lose the GOAWAY that tells
// it why. The streams have ended already.
func (c *conn) linger() {
	end := time.Now().Add(time.Second)
	_ = c.nc.SetReadDeadline(end)
	_, err := io.CopyN(io.Discard, c.nc, 1<<20)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection refuses to read on (the frame guard's error):
		// the client still gets the second to read the GOAWAY before a
		// reset can overtake it.
		time.Sleep(time.Until(end))
	}
	c.nc.Close()
}

// close ends every stream with err and closes the socket; a caller that
// lingers closes it again after.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.closeErr = true, err
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	for _, st := range c.streams {
		st.abortLocked(errConnClosed)
	}
	c.sendCond.Broadcast()
	lingering := c.lingering
	c.mu.Unlock()
	if !lingering {
		c.nc.Close()
	}
	close(c.done)
}

// lockWrite enters a write section.
func (c *conn) lockWrite() {
	c.writers.Add(1)
	c.wmu.Lock()
}

// unlockWrite leaves a write section, flushing when no other writer
// waits: the last one of a burst flushes for all.
func (c *conn) unlockWrite() error {
	if c.writers.Add(-1) == 0 && c.werr == nil && c.bw.Buffered() > 0 {
		c.werr = c.bw.Flush()
		c.ctlPending = false
	}
	err := c.werr
	c.wmu.Unlock()
	return err
}

// writeControl writes a frame of the read loop; it is flushed before the
// loop waits for input (flushControl), so a burst of PINGs is answered
// with one write.
func (c *conn) writeControl(write func()) {
	c.writers.Add(1)
	c.wmu.Lock()
	write()
	if c.frameBuffered() && c.writers.Load() == 1 {
		c.writers.Add(-1)
		c.ctlPending = true
		c.wmu.Unlock()
		return
	}
	_ = c.unlockWrite()
}

// frameBuffered tells whether the read buffer holds a whole frame, which
// the next read takes without waiting on the socket (read loop only). A
// part of one does not count: the client may send the rest only once it
// has the answers that wait in bw.
func (c *conn) frameBuffered() bool {
	n := c.br.Buffered()
	if n < frameHeaderLen {
		return false
	}
	h, _ := c.br.Peek(frameHeaderLen)
	return n >= frameHeaderLen+(int(h[0])<<16|int(h[1])<<8|int(h[2]))
}

// frameHeaderLen is the size of a frame header; its first three bytes
// are the payload's length.
const frameHeaderLen = 9

func (c *conn) flushControl() {
	c.wmu.Lock()
	if c.ctlPending && c.werr == nil {
		c.werr = c.bw.Flush()
	}
	c.ctlPending = false
	c.wmu.Unlock()
}
