package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"portico.dev/portico/internal/dataplane/h1"
)

// newH1Server is the port's HTTP/1 server, Portico's own connection loop
// (package h1); HTTP/2 goes to newH2Server's.
func (ps *portServer) newH1Server() *h1.Server {
	o := &ps.rt.opts
	return &h1.Server{
		Handler:           http.HandlerFunc(ps.serveLimited),
		Log:               ps.log,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ConnContext:       connContext,
		Timeouts:          ps.h1Timeouts,
	}
}

// acceptH1 serves the connections ln hands on: HTTP/1 to the port's h1
// server, TLS connections that chose HTTP/2 to the HTTP/2 server. It
// returns when ln is closed; any other error is retried after a backoff,
// as the sorter's loop retries those of the socket, so that no error ends
// the port's serving while its socket stays bound.
func (ps *portServer) acceptH1(ln net.Listener) error {
	var backoff acceptBackoff
	for {
		c, err := ln.Accept()
		if err == nil {
			backoff.reset()
			go ps.serveH1Conn(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) || ps.stopping.Load() {
			return err
		}
		delay := backoff.next()
		ps.log.Warn("taking a sorted connection failed; retrying", zap.Error(err), zap.Duration("retry_in", delay))
		time.Sleep(delay)
	}
}

func (ps *portServer) serveH1Conn(c net.Conn) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		ps.h1.ServeConn(c)
		return
	}
	// Bounded like net/http bounds it: by the header timeout, both ways.
	d := ps.rt.opts.ReadHeaderTimeout
	_ = tc.SetDeadline(time.Now().Add(d))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		ps.tlsHandshakeError(tc, err)
		return
	}
	_ = tc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == http2.NextProtoTLS {
		// Tracked like cleartext HTTP/2: a shutdown waits for it, then
		// closes it.
		ps.untracked.begin()
		defer ps.untracked.end()
		uc := ps.untracked.add(tc)
		defer uc.Close()
		ps.serveH2(tc, connContext(context.Background(), tc))
		return
	}
	ps.h1.ServeConn(tc)
}

// tlsHandshakeError counts and logs a failed handshake (at debug level: at
// a public port mostly scanners and clients asking for names nobody
// serves here), and answers a client that spoke plain HTTP.
func (ps *portServer) tlsHandshakeError(tc *tls.Conn, err error) {
	detail := err.Error()
	var re tls.RecordHeaderError
	if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		_ = re.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		detail = "client sent an HTTP request to an HTTPS server"
	}
	tc.Close()
	reason := handshakeReason(detail)
	ps.handshakeFailed(reason)
	ps.log.Debug("TLS handshake failed", zap.String("remote", tc.RemoteAddr().String()), zap.String("reason", reason), zap.String("error", detail))
}

// looksLikeHTTP reports whether a TLS record header is the start of an
// HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// shutdownH1 is shutdownCtx's part for the h1 server: stop accepting,
// then drain HTTP/1 until ctx ends (HTTP/2 drains alongside, ps.h2).
func (ps *portServer) shutdownH1(ctx context.Context) {
	if err := ps.h1ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		ps.log.Debug("closing the listener", zap.Error(err))
	}
	if err := ps.h1.Shutdown(ctx); err != nil {
		ps.log.Warn("drain incomplete, closing connections", zap.Error(err))
		_ = ps.h1.Close()
	}
}

// CloseWrite shuts the write side of the socket, so that the h1 server can
// close a connection without a reset destroying its last response.
func (c *peekedConn) CloseWrite() error {
	if tc, ok := unwrapTCP(c.Conn); ok {
		return tc.CloseWrite()
	}
	return fmt.Errorf("close write: %T is not a TCP connection", c.Conn)
}
