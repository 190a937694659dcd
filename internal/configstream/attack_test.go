package configstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestStreamEndsWhenTokenRevoked: a stream authenticated once must not go
// on delivering new snapshots (new keys) to a token that was revoked since
// (its pod or ServiceAccount deleted): the hub reviews the token again
// before it sends a changed snapshot, and ends the stream when it no
// longer passes.
func TestStreamEndsWhenTokenRevoked(t *testing.T) {
	var revoked, unavailable atomic.Bool
	auth := func(ctx context.Context, token string) (string, string, error) {
		switch {
		case unavailable.Load():
			return "", "", fmt.Errorf("%w: too many reviews", ErrReviewUnavailable)
		case revoked.Load():
			return "", "", errors.New("token revoked")
		}
		return testAuth(ctx, token)
	}
	h := NewHub(auth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")}})
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
	// A review that cannot be made is no verdict: the stream goes on.
	unavailable.Store(true)
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v2")}})
	for {
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("the stream ended when its token could not be reviewed: %v", err)
		}
		if up := (Update{}); json.Unmarshal(line, &up) == nil && up.Version != "" {
			break
		}
	}
	unavailable.Store(false)
	revoked.Store(true)
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v3")}})
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
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")},
		{Gateway: other, ServiceAccount: "other-dedicated", Resources: objectsOfRoute("v1")}})
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

// withHosts gives the snapshot's Gateway listeners of these hostnames.
func withHosts(r *snapshot.Resources, hosts ...string) *snapshot.Resources {
	for _, h := range hosts {
		name := gwv1.Hostname(h)
		r.Gateways[0].Spec.Listeners = append(r.Gateways[0].Spec.Listeners,
			gwv1.Listener{Name: gwv1.SectionName(h), Hostname: &name, Port: 80, Protocol: gwv1.HTTPProtocolType})
	}
	return r
}

// TestChallengesOnlyForOwnHosts is an attack by a tenant whose Gateway
// orders a certificate for a name whose DNS points at another tenant's
// data plane (a wildcard record of the other's domain): the CA's
// challenge for that name reaches the other's data plane, which asked
// the controller, and the controller answered for any host, validating
// the order. A data plane now gets answers only for its own Gateway's
// listener hostnames, and a data plane asking directly for another's gets
// nothing either.
func TestChallengesOnlyForOwnHosts(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Challenges = fakeACME{"a.example.com/tok-1": "tok-1.a", "b.example.com/tok-2": "tok-2.b"}
	other := types.NamespacedName{Namespace: "apps", Name: "other"}
	otherSnap := withHosts(objectsOfRoute("v1"), "b.example.com")
	otherSnap.Gateways[0].Name = "other"
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: withHosts(objectsOfRoute("v1"), "a.example.com")},
		{Gateway: other, ServiceAccount: "other-dedicated", Resources: otherSnap}})
	srv, _ := hubServer(t, h, "127.0.0.1:0")
	ask := func(token, gateway, host, challenge string) (int, string) {
		q := url.Values{"gateway": {gateway}, "host": {host}, "token": {challenge}}
		req, _ := http.NewRequest(http.MethodGet, srv.URL+ChallengePath+"?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := ask("web-token", "apps/web", "A.example.com:80", "tok-1"); code != http.StatusOK || body != "tok-1.a" {
		t.Errorf("own host: %d %q", code, body)
	}
	if code, body := ask("web-token", "apps/web", "b.example.com", "tok-2"); code == http.StatusOK {
		t.Errorf("web's data plane got the answer for another Gateway's host: %q", body)
	}
	if code, _ := ask("web-token", "apps/other", "b.example.com", "tok-2"); code != http.StatusForbidden {
		t.Errorf("web's data plane asking as apps/other: %d, want 403", code)
	}
	if code, body := ask("other-token", "apps/other", "b.example.com", "tok-2"); code != http.StatusOK || body != "tok-2.b" {
		t.Errorf("other's own host: %d %q", code, body)
	}
}

// TestStreamStalledReader: a data plane (its token valid) that opens a
// stream and never reads it must not hold the hub's goroutine and
// connection for the stream's whole lifetime: a write that does not
// complete within WriteTimeout ends the stream and closes the connection.
func TestStreamStalledReader(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.WriteTimeout = 300 * time.Millisecond
	h.Heartbeat = 50 * time.Millisecond
	big := objectsOfRoute("v1")
	big.Secrets[0].Data["tls.key"] = []byte(strings.Repeat("k", 16<<20)) // more than socket buffers hold
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: big}})
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "example.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+StreamPath+"?gateway=apps/web HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer web-token\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // not reading
	// Draining now gets what was buffered and then the end: without a
	// write deadline the hub would go on with heartbeats for ever.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the hub kept the stream of a data plane that stopped reading")
	}
}

// TestNoProbingOtherNamespaces: a data plane (or anyone with a token of
// any ServiceAccount for the audience) must not learn which Gateways
// with data planes exist in other namespaces: a Gateway there that exists
// and one that does not get the same answer.
func TestNoProbingOtherNamespaces(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: types.NamespacedName{Namespace: "shop", Name: "exists"}, ServiceAccount: "exists-dedicated", Resources: objectsOfRoute("v1")}})
	srv, _ := hubServer(t, h, "127.0.0.1:0")
	code := func(gateway string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+StreamPath+"?gateway="+gateway, nil)
		req.Header.Set("Authorization", "Bearer web-token")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := code("shop/exists"), code("shop/absent"); a != b {
		t.Errorf("another namespace's Gateway that exists: %d, one that does not: %d", a, b)
	}
	if c := code("apps/not-yet"); c != http.StatusServiceUnavailable {
		t.Errorf("its own namespace's Gateway not published yet: %d, want 503 (retry)", c)
	}
}
