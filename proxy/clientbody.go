package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"

	"go.uber.org/zap"
)

// clientBody is a request body that remembers the first error reading it.
// Such an error is the client's (it left mid-upload, sent a malformed
// chunked body, or too much), not the backend's, though the transport
// reports it as a failed backend request.
type clientBody struct {
	io.ReadCloser
	mu  sync.Mutex // the transport reads in a goroutine of its own
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *clientBody) failed() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// watchBody makes r's body a clientBody; nil when r has none.
func watchBody(r *http.Request) *clientBody {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b := &clientBody{ReadCloser: r.Body}
	r.Body = b
	return b
}

// clientBodyStatus is the status of a request whose body failed with err:
// 413 past a size limit, 408 past a read deadline, 499 (nothing is sent)
// when the client left, 400 for a body that cannot be read.
func clientBodyStatus(r *http.Request, err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout
	case r.Context().Err() != nil, errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return statusClientClosed
	}
	return http.StatusBadRequest
}

// answerClientBodyError answers a request whose body failed with err. It is
// logged at debug level only: a client that gives up is routine, and one
// that sends garbage must not fill the log.
func answerClientBodyError(log *zap.Logger, w http.ResponseWriter, r *http.Request, err error) {
	status := clientBodyStatus(r, err)
	log.Debug("client request body failed", zap.String("host", r.Host), zap.String("path", r.URL.Path), zap.Int("status", status), zap.Error(err))
	if status == statusClientClosed {
		// Nobody reads an answer, and returning without one would make the
		// server send a 200: an HTTP/1 connection is closed instead (over
		// HTTP/2 the stream is gone already). The access log and metrics
		// say 499.
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	// The rest of the body, if any, cannot be found on an HTTP/1
	// connection. An HTTP/2 stream ends alone: there, the header would make
	// the server close the whole connection, with the client's other
	// streams.
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	writeError(w, status)
}
