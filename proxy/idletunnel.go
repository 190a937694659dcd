package proxy

import (
	"io"
	"sync/atomic"
	"time"
)

// idleTunnel is the backend side of an upgraded connection (WebSocket)
// whose BackendTrafficPolicy sets an idle timeout: closed after that long
// without a byte either way, which ends the client side too, as a pooled
// connection is dropped after it. A read blocked on a quiet tunnel is no
// activity: only bytes are.
type idleTunnel struct {
	io.ReadWriteCloser
	idle  time.Duration
	last  atomic.Int64 // Unix ns of the last byte
	timer *time.Timer
}

func newIdleTunnel(rwc io.ReadWriteCloser, idle time.Duration) *idleTunnel {
	t := &idleTunnel{ReadWriteCloser: rwc, idle: idle}
	t.last.Store(time.Now().UnixNano())
	t.timer = time.AfterFunc(idle, t.check)
	return t
}

// check closes the tunnel if it was idle for t.idle, or waits for the
// rest of that time.
func (t *idleTunnel) check() {
	quiet := time.Since(time.Unix(0, t.last.Load()))
	if quiet >= t.idle {
		_ = t.ReadWriteCloser.Close()
		return
	}
	t.timer.Reset(t.idle - quiet)
}

func (t *idleTunnel) Read(p []byte) (int, error) {
	n, err := t.ReadWriteCloser.Read(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (t *idleTunnel) Write(p []byte) (int, error) {
	n, err := t.ReadWriteCloser.Write(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (t *idleTunnel) Close() error {
	t.timer.Stop()
	return t.ReadWriteCloser.Close()
}
