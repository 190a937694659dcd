package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"
)

// TestStreamEndsWhenTokenRevoked: a stream authenticated once must not go
// on delivering new snapshots (new keys) to a token that was revoked since
// (its pod or ServiceAccount deleted): the hub reviews the token again
// before it sends a changed snapshot, and ends the stream when it no
// longer passes.
func TestStreamEndsWhenTokenRevoked(t *testing.T) {
	var revoked atomic.Bool
	auth := func(ctx context.Context, token string) (string, string, error) {
		if revoked.Load() {
			return "", "", errors.New("token revoked")
		}
		return testAuth(ctx, token)
	}
	h := NewHub(auth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: snapshot("v1")}})
	srv, _ := hubServer(t, h, "127.0.0.1:0")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+StreamPath+"?gateway=apps/web", nil)
	req.Header.Set("Authorization", "Bearer web-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	if _, err := lines.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	revoked.Store(true)
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: snapshot("v2")}})
	for {
		line, err := lines.ReadBytes('\n')
		if err != nil {
			return // the stream ended
		}
		var up Update
		if json.Unmarshal(line, &up) == nil && up.Version != "" {
			t.Fatalf("a revoked token received snapshot %s", up.Version)
		}
	}
}

// TestAckRefusesHostileAcks: an authenticated data plane's acknowledgement
// reaches the Deployment's annotations (OnAck), so one that names another
// Gateway, or whose version is not a version at all (a 60 KB string to
// write into an annotation), is refused and not passed on.
func TestAckRefusesHostileAcks(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	var mu sync.Mutex
	var got []Ack
	h.OnAck = func(_ types.NamespacedName, _ string, a Ack) { mu.Lock(); got = append(got, a); mu.Unlock() }
	other := types.NamespacedName{Namespace: "apps", Name: "other"}
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: snapshot("v1")},
		{Gateway: other, ServiceAccount: "other-dedicated", Resources: snapshot("v1")}})
	current, _ := h.Version(web)
	srv, _ := hubServer(t, h, "127.0.0.1:0")
	post := func(a Ack) int {
		body, _ := json.Marshal(a)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+AckPath, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer web-token")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, c := range map[string]struct {
		ack  Ack
		want int
	}{
		"another Gateway":  {Ack{Gateway: "apps/other", Version: current}, http.StatusForbidden},
		"huge version":     {Ack{Gateway: "apps/web", Version: strings.Repeat("a", 60<<10)}, http.StatusBadRequest},
		"version not hex":  {Ack{Gateway: "apps/web", Version: "v1\nforged log line"}, http.StatusBadRequest},
		"huge pod name":    {Ack{Gateway: "apps/web", Version: current, Pod: strings.Repeat("p", 60<<10)}, http.StatusBadRequest},
		"own, current":     {Ack{Gateway: "apps/web", Version: current, Pod: "web-1"}, http.StatusNoContent},
		"own, with errors": {Ack{Gateway: "apps/web", Version: current, Error: strings.Repeat("e", 10<<10)}, http.StatusNoContent},
	} {
		if code := post(c.ack); code != c.want {
			t.Errorf("%s: %d, want %d", name, code, c.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d acknowledgements passed on, want the 2 good ones", len(got))
	}
	for _, a := range got {
		if a.Gateway != "apps/web" || a.Version != current || len(a.Error) > maxAckError+len("...") {
			t.Errorf("passed on: gateway %s, version %.40s, error of %d bytes", a.Gateway, a.Version, len(a.Error))
		}
	}
}

// TestAckSlowBodyBeforeAuth: a client with no token that sends an
// acknowledgement's headers and then trickles (or withholds) its body must
// not hold a connection and a goroutine of the hub for ever: the body is
// read under a deadline.
func TestAckSlowBodyBeforeAuth(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.BodyTimeout = 300 * time.Millisecond
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST "+AckPath+" HTTP/1.1\r\nHost: hub\r\nContent-Length: 1000\r\n\r\n{\"gateway\":"); err != nil {
		t.Fatal(err)
	}
	// Generous: the hub's deadline is 300ms; without one this read only
	// ends at its own deadline.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.ReadAll(conn)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the hub still held the connection of a client that never sent its body")
	}
}
