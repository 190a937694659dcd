// Package h2 serves HTTP/2 connections (RFC 9113) to an http.Handler.
//
// One goroutine per connection reads frames and handles the control
// frames itself; streams run their handler on pooled goroutines, whose
// stacks stay grown. Handlers write their HEADERS and DATA frames
// themselves, under the connection's write lock, into one buffered
// writer: the last writer of a burst flushes it, so a handler that
// finishes while others write does not flush on its own, and an explicit
// Flush reaches the socket at once or with the writer after it. Nothing
// hops between goroutines per frame.
package h2

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"portico.dev/portico/internal/dataplane/workers"
)

// Server serves HTTP/2 connections to a Handler. Set Handler; the limits
// take their defaults when zero. Connections are handed to ServeConn by
// the caller, after TLS and protocol sorting.
type Server struct {
	Handler http.Handler
	Log     *zap.Logger
	// MaxConcurrentStreams is the streams a client may have open at once;
	// more are refused (REFUSED_STREAM). Default 250.
	MaxConcurrentStreams uint32
	// MaxReadFrameSize is the largest frame the server reads (its
	// SETTINGS_MAX_FRAME_SIZE). Default 1 MiB.
	MaxReadFrameSize uint32
	// MaxUploadBufferPerConnection and MaxUploadBufferPerStream are the
	// receive windows: how many request body bytes a connection and a
	// stream may have unread. Default 1 MiB each.
	MaxUploadBufferPerConnection int32
	MaxUploadBufferPerStream     int32
	// MaxHeaderBytes bounds a request's header list (and its trailers):
	// SETTINGS_MAX_HEADER_LIST_SIZE, and the bound on CONTINUATION
	// frames. Default 1 MiB.
	MaxHeaderBytes int
	// IdleTimeout closes a connection (GOAWAY) after this long without an
	// open stream. Zero: no bound.
	IdleTimeout time.Duration
	// WriteByteTimeout closes a connection whose socket accepts no byte
	// for this long: a client that stopped reading. Zero: no bound.
	WriteByteTimeout time.Duration
	// PrefaceTimeout bounds the wait for the client's preface. Default
	// 10 s.
	PrefaceTimeout time.Duration

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutting atomic.Bool
	gone     chan struct{} // signalled when a connection ends
	workers  workers.Pool
	// held are the buffers of response bodies' first bytes.
	held sync.Pool
	// bodyBufs are request body buffers (*[]byte) of streams that have
	// nothing unread.
	bodyBufs sync.Pool
}

const (
	defaultMaxStreams     = 250
	defaultMaxFrameSize   = 1 << 20
	defaultUploadBuffer   = 1 << 20
	defaultMaxHeaderBytes = 1 << 20
	defaultPrefaceTimeout = 10 * time.Second
	// bodyBufSize is a new request body buffer's size: a DATA frame's,
	// by default. Buffers grown past maxPooledBody are not kept.
	bodyBufSize   = 16 << 10
	maxPooledBody = 64 << 10
)

// ServeConn serves c until it closes, a connection error, the idle
// timeout or Shutdown. ctx is the base of the requests' contexts. It
// returns once every handler of the connection has returned.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	s.ServeConnWith(ctx, c, ConnOptions{})
}

// ConnOptions override the Server's settings for one connection; a zero
// field keeps the Server's.
type ConnOptions struct {
	MaxConcurrentStreams uint32
	IdleTimeout          time.Duration
}

// ServeConnWith is ServeConn with o overriding the Server's settings for
// c (a listener's own, chosen by its handshake).
func (s *Server) ServeConnWith(ctx context.Context, c net.Conn, o ConnOptions) {
	cn := newConn(s, ctx, c)
	cn.maxStreams, cn.idle = s.maxStreams(), s.IdleTimeout
	if o.MaxConcurrentStreams > 0 {
		cn.maxStreams = o.MaxConcurrentStreams
	}
	if o.IdleTimeout > 0 {
		cn.idle = o.IdleTimeout
	}
	if !s.track(cn) {
		c.Close()
		return
	}
	cn.serve()
	s.untrack(cn)
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
		s.gone = make(chan struct{}, 1)
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	gone := s.gone
	s.mu.Unlock()
	select {
	case gone <- struct{}{}:
	default:
	}
}

// Shutdown sends every connection a GOAWAY with the last stream it took,
// lets those streams finish and closes each connection once it has none;
// it returns when all are closed, or ctx's error when ctx ends first
// (Close ends the rest).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting.Store(true)
	if s.gone == nil {
		s.gone = make(chan struct{}, 1)
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Each GOAWAY from its own goroutine: one may wait for the write
	// lock of a handler stuck on a client that does not read, and ctx
	// must still end the wait (Close then ends that write).
	for _, c := range conns {
		go c.goAway(codeNo)
	}
	s.workers.Close()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gone:
		case <-t.C:
		}
	}
}

// Close closes every connection at once, ending their streams and their
// sockets.
func (s *Server) Close() error {
	s.mu.Lock()
	s.shutting.Store(true)
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(errServerClosed)
		// A lingering connection's socket too: its read loop may be
		// stuck on a client that does not read.
		c.nc.Close()
	}
	s.workers.Close()
	return nil
}

func (s *Server) log() *zap.Logger {
	if s.Log == nil {
		return zap.NewNop()
	}
	return s.Log
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams > 0 {
		return s.MaxConcurrentStreams
	}
	return defaultMaxStreams
}

func (s *Server) maxFrameSize() uint32 {
	if s.MaxReadFrameSize >= 1<<14 && s.MaxReadFrameSize < 1<<24 {
		return s.MaxReadFrameSize
	}
	return defaultMaxFrameSize
}

func (s *Server) connWindow() int32 {
	if s.MaxUploadBufferPerConnection >= initialWindow {
		return s.MaxUploadBufferPerConnection
	}
	return defaultUploadBuffer
}

func (s *Server) streamWindow() int32 {
	if s.MaxUploadBufferPerStream > 0 {
		return s.MaxUploadBufferPerStream
	}
	return defaultUploadBuffer
}

func (s *Server) maxHeaderBytes() uint32 {
	if s.MaxHeaderBytes > 0 {
		return uint32(min(s.MaxHeaderBytes, 1<<30))
	}
	return defaultMaxHeaderBytes
}

func (s *Server) prefaceTimeout() time.Duration {
	if s.PrefaceTimeout > 0 {
		return s.PrefaceTimeout
	}
	return defaultPrefaceTimeout
}

// heldBuf is a buffer of holdSize for a response's first body bytes.
func (s *Server) heldBuf() *[]byte {
	if b, ok := s.held.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, holdSize)
	return &b
}

// bodyBuf is an empty request body buffer.
func (s *Server) bodyBuf() *[]byte {
	if b, ok := s.bodyBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, bodyBufSize)
	return &b
}

func (s *Server) putHeldBuf(b *[]byte) {
	if b != nil {
		*b = (*b)[:0]
		s.held.Put(b)
	}
}
