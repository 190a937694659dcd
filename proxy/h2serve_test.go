package proxy

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestH2ShutdownSendsGoAway: a port that closes tells its HTTP/2
// connections with a GOAWAY naming the stream in flight, lets that stream
// finish, then closes the connection.
func TestH2ShutdownSendsGoAway(t *testing.T) {
	rt := relRuntime(t, nil)
	release := make(chan struct{})
	backend, hits := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte("finished")) //nolint:errcheck // test backend
	})
	addr := relHTTPPort(t, rt, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	h := newH2Client(t, c, "http")
	if err := h.get(1, "/"); err != nil {
		t.Fatal(err)
	}
	for hits.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- rt.Close(ctx)
	}()
	var goAway *http2.GoAwayFrame
	var status string
	var body []byte
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // the server may be gone
			}
		case *http2.GoAwayFrame:
			goAway = f
			close(release) // the stream in flight may answer now
		case *http2.HeadersFrame:
			status = "headers"
		case *http2.DataFrame:
			body = append(body, f.Data()...)
		}
	}
	if goAway == nil {
		close(release)
		t.Fatal("no GOAWAY before the connection closed")
	}
	if goAway.LastStreamID != 1 || goAway.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY last stream %d code %v, want 1 NO_ERROR", goAway.LastStreamID, goAway.ErrCode)
	}
	if status == "" || string(body) != "finished" {
		t.Errorf("the stream in flight got %q %q, want its answer", status, body)
	}
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}
}
