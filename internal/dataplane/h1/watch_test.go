package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchArmedAcrossRequests: the close watch's timer stays armed from
// one request to the next instead of being set and stopped for each. A
// long request that follows many quick ones on the same connection (the
// timer armed for an earlier one fires early for it), one that follows a
// pause past the timer's firing (it disarmed), and one on a connection
// whose conn state served others before are each still cancelled when
// their client leaves; quick requests never start a background read.
func TestWatchArmedAcrossRequests(t *testing.T) {
	const delay = 40 * time.Millisecond
	cause := make(chan error, 1)
	var started atomic.Int64
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/wait" {
			io.WriteString(w, "quick")
			return
		}
		started.Add(1)
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(5 * time.Second):
			cause <- nil
		}
	}, func(s *Server) { s.CloseDetectDelay = delay })

	quick := func(br *bufio.Reader, c io.Writer, n int) {
		t.Helper()
		for i := range n {
			fmt.Fprintf(c, "GET /q%d HTTP/1.1\r\nHost: a\r\n\r\n", i)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	waitGone := func(what string) {
		t.Helper()
		select {
		case err := <-cause:
			if !errors.Is(err, errClientGone) {
				t.Fatalf("%s: request context %v, want cancelled as the client left", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the handler never ended", what)
		}
	}
	for _, tc := range []struct {
		name  string
		quick int
		pause time.Duration
	}{
		{"after quick requests spread over several delays", 200, 0},
		{"after a pause past the timer", 3, 4 * delay},
		{"first request", 0, 0},
		{"right after one quick request", 1, 0},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		start := time.Now()
		quick(br, c, tc.quick)
		if tc.quick > 0 && tc.pause == 0 && time.Since(start) < 2*delay {
			// Spread the quick requests past the delay, so that the timer
			// armed for the first fires during a later one.
			for time.Since(start) < 2*delay {
				quick(br, c, 1)
			}
		}
		time.Sleep(tc.pause)
		io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
		time.Sleep(3 * delay)
		c.Close()
		waitGone(tc.name)
	}
	if n := started.Load(); n != 4 {
		t.Fatalf("%d waiting requests, want 4", n)
	}
}
