package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Server serves HTTP/1 connections to a Handler. Its zero value is not
// usable: set Handler and Log. Connections are handed to ServeConn by the
// caller's accept loop, which does TLS handshakes and protocol sorting.
type Server struct {
	Handler http.Handler
	Log     *zap.Logger
	// ReadHeaderTimeout bounds reading a request's head, from its first
	// byte (slowloris); for the first request of a connection, from the
	// connection's start. It also bounds reading what a handler left
	// unread of a body, after the answer. IdleTimeout bounds the wait for the next request
	// of a kept-alive connection. Zero: no bound.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// Timeouts, when set, is asked before each request of a connection
	// (ctx is the connection's, ConnContext's) for the header and idle
	// timeouts of its wait and head, in place of ReadHeaderTimeout and
	// IdleTimeout; a zero one leaves the server's.
	Timeouts func(ctx context.Context) (header, idle time.Duration)
	// MaxHeaderBytes bounds the bytes of a request's head (request line
	// and fields) and, separately, of the trailer of a chunked body.
	MaxHeaderBytes int
	// ConnContext, when set, makes the base context of a connection's
	// requests.
	ConnContext func(context.Context, net.Conn) context.Context
	// CloseDetectDelay is how long a handler runs before the connection is
	// watched for the client going away (see conn.watch); zero: 50ms.
	CloseDetectDelay time.Duration

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutting atomic.Bool
	// idle is signalled when a connection ends or goes idle, for Shutdown.
	idle chan struct{}
	// conns are pooled with their buffers.
	pool sync.Pool
}

// Connection states, for Shutdown: a connection is closed by Shutdown
// only while idle, and a request is served only if the connection could
// be made active first.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// defaultMaxHeaderBytes applies when MaxHeaderBytes is not set.
const defaultMaxHeaderBytes = 1 << 20

// maxPostHandlerRead is how much of a request body the handler left unread
// is read and thrown away to keep the connection; past it, it is closed.
const maxPostHandlerRead = 256 << 10

// ServeConn serves c until it closes, the client or a handler asks for it
// to close, or a protocol error. It returns when the connection is closed
// or hijacked. A *tls.Conn must have completed its handshake.
func (s *Server) ServeConn(c net.Conn) {
	cn, _ := s.pool.Get().(*conn)
	if cn == nil {
		cn = &conn{srv: s}
		cn.cr.c = cn
		cn.br = bufio.NewReaderSize(&cn.cr, 4096)
		cn.bw = bufio.NewWriterSize(connWriter{cn}, 4096)
	} else {
		cn.br.Reset(&cn.cr)
		cn.bw.Reset(connWriter{cn})
	}
	cn.rwc = c
	cn.remote = c.RemoteAddr().String()
	cn.tls = nil
	if tc, ok := c.(*tls.Conn); ok {
		st := tc.ConnectionState()
		cn.tls = &st
	}
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, c.LocalAddr())
	if s.ConnContext != nil {
		ctx = s.ConnContext(ctx, c)
	}
	cn.base = ctx
	if !s.track(cn) {
		c.Close()
		return
	}
	hijacked := cn.serve()
	s.untrack(cn)
	if hijacked {
		return // its buffers went with it
	}
	cn.reset()
	s.pool.Put(cn)
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
		s.idle = make(chan struct{}, 1)
	}
	// A connection waiting for its first request is not kept alive yet:
	// it is no candidate for shedding (idleSince 0).
	c.idleSince.Store(0)
	c.state.Store(stateIdle)
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.signal()
}

func (s *Server) signal() {
	if s.shutting.Load() {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// Shutdown stops new connections, closes idle ones, and waits for the
// others to finish their request (each closes after it) until ctx ends;
// then it returns ctx's error and leaves what is left to Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	// The channel first: signal reads it, without the lock, once it sees
	// shutting set.
	if s.idle == nil {
		s.idle = make(chan struct{}, 1)
	}
	s.shutting.Store(true)
	s.mu.Unlock()
	// A poll as well as the signal: a connection between two states when
	// the signal came is looked at again soon.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.idle:
		case <-t.C:
		}
	}
}

// closeIdle closes the idle connections; it reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.rwc.Close()
		}
	}
	return len(s.conns) == 0
}

// AppendIdle appends to dst when each kept-alive connection waiting for
// its next request went idle (Unix ns), for a caller that must free file
// descriptors and looks for the oldest idle connections of several
// servers. Connections waiting for their first request are left out:
// their clients have only just connected.
func (s *Server) AppendIdle(dst []int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if since := c.idleSince.Load(); since != 0 && c.state.Load() == stateIdle {
			dst = append(dst, since)
		}
	}
	return dst
}

// CloseIdleSince closes the kept-alive connections that have waited for
// their next request since before or at since (Unix ns), and reports how
// many it closed. A connection whose next request arrives meanwhile is
// left alone, as Shutdown leaves it: the state decides, not the time.
func (s *Server) CloseIdleSince(since int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if t := c.idleSince.Load(); t == 0 || t > since {
			continue
		}
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.rwc.Close()
			n++
		}
	}
	return n
}

// Close closes every connection at once, active or not.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.idle == nil {
		s.idle = make(chan struct{}, 1)
	}
	s.shutting.Store(true)
	for c := range s.conns {
		c.state.Store(stateClosed)
		c.rwc.Close()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) log() *zap.Logger {
	if s.Log == nil {
		return zap.NewNop()
	}
	return s.Log
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return defaultMaxHeaderBytes
}

func (s *Server) closeDetectDelay() time.Duration {
	if s.CloseDetectDelay > 0 {
		return s.CloseDetectDelay
	}
	return 50 * time.Millisecond
}

// errClientGone is the cause of a request context cancelled because its
// client closed the connection.
var errClientGone = errors.New("client closed the connection")
