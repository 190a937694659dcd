package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestStreamedBodiesFlushedAtOnce: what a backend flushes of a body of
// unknown length (a chunked stream, a long poll) or of an event stream (even
// one with a Content-Length) reaches the client while the backend still
// holds the rest; nothing waits for the server's buffer to fill.
func TestStreamedBodiesFlushedAtOnce(t *testing.T) {
	const first, second = "first part\n", "second part\n"
	for _, tc := range []struct {
		name, contentType string
		length            bool
	}{
		{"chunked", "text/plain", false},
		{"event stream", "text/event-stream", false},
		{"event stream with a length", "text/event-stream", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				if tc.length {
					w.Header().Set("Content-Length", strconv.Itoa(len(first)+len(second)))
				}
				io.WriteString(w, first)
				http.NewResponseController(w).Flush() //nolint:errcheck // test backend
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, second)
			})
			addr := relHTTPPort(t, relRuntime(t, nil), backend)
			c := relDial(t, addr)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no headers while the backend holds the rest of the body: %v", err)
			}
			defer resp.Body.Close()
			got := make([]byte, len(first))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != first {
				t.Fatalf("first part: %q, %v (the backend flushed it)", got, err)
			}
			close(release)
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != second {
				t.Fatalf("rest: %q, %v", rest, err)
			}
		})
	}
}
