package kube

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestHTTPRouteDataPlane covers what the issue asks of HTTPRoute beyond the
// conformance suite, with the same echo pods and real sockets.
func TestHTTPRouteDataPlane(t *testing.T) {
	e := startConformance(t, "portico-dataplane")
	c := e.client("same-namespace")

	t.Run("forwarding headers and path", func(t *testing.T) {
		// Raw bytes, so that nothing between the test and Portico tidies the
		// request up.
		target := "/a%3Bb/%7Ec/./d//e/../f?x=%20&y"
		reply := rawGet(t, fmt.Sprintf("127.0.0.1:%d", e.port("same-namespace")), target, []string{
			"Host: forwarding.org",
			"Connection: keep-alive, X-Hop",
			"X-Hop: secret",
			"Keep-Alive: timeout=5",
			"Proxy-Authorization: Basic Zm9vOmJhcg==",
			"Forwarded: for=203.0.113.9",
			"X-Forwarded-For: 203.0.113.9",
			"X-Forwarded-Host: evil.example",
			"X-Forwarded-Proto: https",
			"X-Kept: yes",
		})
		// The normal form: unreserved escapes decoded, dot segments
		// resolved, repeated slashes merged, other escapes and the query
		// untouched.
		if want := "/a%3Bb/~c/d/f?x=%20&y"; reply.Path != want {
			t.Errorf("backend saw %q, want %q", reply.Path, want)
		}
		checkForwarded(t, reply, "forwarding.org", "http")
	})

	t.Run("forwarding over TLS and HTTP/2", func(t *testing.T) {
		tc := e.tlsClient("same-namespace-with-https-listener", "forwarding.org", true)
		reply := tc.check(t, expect{
			Req:       request{Host: "forwarding.org", Path: "/tls", Headers: h("X-Forwarded-Proto", "http", "X-Kept", "yes")},
			Seen:      &seen{Path: "/tls"},
			Backend:   v1,
			Namespace: infraNS,
		})
		checkForwarded(t, reply, "forwarding.org", "https")
	})

	t.Run("mirrored copies are forwarded the same way", func(t *testing.T) {
		target := fmt.Sprintf("/mirror?id=%d", time.Now().UnixNano())
		c.check(t, expect{
			Req:       request{Host: "forwarding.org", Path: target, Headers: h("Connection", "X-Hop", "X-Hop", "secret", "Forwarded", "for=203.0.113.9", "X-Forwarded-For", "203.0.113.9", "X-Kept", "yes")},
			Seen:      &seen{Path: target},
			Backend:   v1,
			Namespace: infraNS,
		})
		e.waitMirrored(t, target, []string{infraNS + "/" + v2})
		for _, p := range e.podsOf(infraNS + "/" + v2) {
			for _, r := range p.requests() {
				if r.Path == target {
					checkForwarded(t, &r, "forwarding.org", "http")
				}
			}
		}
	})

	t.Run("an unknown ExtensionRef filter fails its rule only", func(t *testing.T) {
		res, st := e.statuses(t)
		route := infra("unknown-filter")
		mustHaveCondition(t, res, st, route, infra("same-namespace"), string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, string(gwv1.RouteReasonAccepted))
		mustHaveCondition(t, res, st, route, infra("same-namespace"), string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, string(gwv1.RouteReasonInvalidKind))
		rc := meta.FindStatusCondition(parentStatus(t, st, route, infra("same-namespace")).Conditions, string(gwv1.RouteConditionResolvedRefs))
		if !strings.Contains(rc.Message, "ExtensionRef") || !strings.Contains(rc.Message, "Unknown") {
			t.Errorf("ResolvedRefs message %q does not say which filter", rc.Message)
		}
		runCases(t, c, []expect{
			hostAnswers("unknown-filter.example", "/extension", 500),
			hostTo("unknown-filter.example", "/other", v2),
		})
	})

	t.Run("backends that are missing or weigh nothing", func(t *testing.T) {
		e.cond(t, "backend-shares", "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
		e.cond(t, "backend-shares", "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonBackendNotFound)
		runCases(t, c, []expect{
			hostAnswers("shares.example", "/missing-port", 500),
			hostAnswers("shares.example", "/all-zero", 500),
			hostTo("shares.example", "/one-zero", v2),
		})
		// Half the weight is a missing Service: that share gets 500s, the
		// other reaches the backend.
		codes := map[int]int{}
		for range 60 {
			resp, _, err := c.roundTrip(request{Host: "shares.example", Path: "/half-missing"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			codes[resp.StatusCode]++
		}
		if codes[200] == 0 || codes[500] == 0 || codes[200]+codes[500] != 60 {
			t.Errorf("answers %v, want both 200 and 500 and nothing else", codes)
		}
	})

	t.Run("a rule that cannot be compiled is dropped, the others serve", func(t *testing.T) {
		res, st := e.statuses(t)
		route := infra("partly-invalid")
		mustHaveCondition(t, res, st, route, infra("same-namespace"), string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, string(gwv1.RouteReasonAccepted))
		mustHaveCondition(t, res, st, route, infra("same-namespace"), string(gwv1.RouteConditionPartiallyInvalid), metav1.ConditionTrue, string(gwv1.RouteReasonUnsupportedValue))
		runCases(t, c, []expect{
			hostTo("partly.example", "/bad/(", v2),
			hostTo("partly.example", "/good", v2),
		})
	})

	t.Run("no retries unless configured", func(t *testing.T) {
		for _, mode := range []struct {
			method, query string
			want          int
		}{
			{"GET", "responseCode=503", 503},
			// The backend resets the connection. (An idempotent request
			// may be sent again once when a reused connection fails before
			// any answer: that is how a connection the backend closed while
			// idle is told from a failed request.)
			{"POST", "", 502},
		} {
			id := fmt.Sprintf("%d", time.Now().UnixNano())
			target := fmt.Sprintf("/retry/plain?succeedAfter=1&uuid=%s&%s", id, mode.query)
			c.check(t, expect{Req: request{Method: mode.method, Host: "plain.example", Path: target}, Status: []int{mode.want}})
			if n := e.servedCount(infraNS+"/"+v3, target); n != 1 {
				t.Errorf("%s: the backend saw %d attempts, want 1", target, n)
			}
		}
	})

	t.Run("retries wait at least the backoff", func(t *testing.T) {
		target := fmt.Sprintf("/retry/backoff?responseCode=500&succeedAfter=2&uuid=%d", time.Now().UnixNano())
		start := time.Now()
		c.check(t, expect{Req: request{Host: "backoff.example", Path: target}, Backend: v3, Namespace: infraNS})
		// A lower bound only: the spec lets backoff grow and jitter.
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("two retries with a 150ms backoff took %v", took)
		}
		if n := e.servedCount(infraNS+"/"+v3, target); n != 3 {
			t.Errorf("the backend saw %d attempts, want 3", n)
		}
	})

	t.Run("WebSocket through a Service port without appProtocol", func(t *testing.T) {
		wsEcho(t, fmt.Sprintf("127.0.0.1:%d", e.port("same-namespace")), "plain.example")
	})

	t.Run("requests are spread over endpoints on reused connections", func(t *testing.T) {
		id := fmt.Sprintf("%d", time.Now().UnixNano())
		pods := map[string]int{}
		for i := range 20 {
			reply := c.check(t, hostTo("endpoints.example", fmt.Sprintf("/balanced?id=%s-%d", id, i), v1))
			pods[reply.Pod]++
		}
		if len(pods) != 2 {
			t.Fatalf("requests reached %v, want both pods", pods)
		}
		for pod, n := range pods {
			if n < 9 || n > 11 {
				t.Errorf("pod %s got %d of 20 requests, want about half: %v", pod, n, pods)
			}
		}
		conns := map[string]bool{}
		for _, p := range e.podsOf(infraNS + "/" + v1) {
			for _, r := range p.requests() {
				if strings.Contains(r.Path, id) {
					conns[p.name+" "+r.Remote] = true
				}
			}
		}
		if len(conns) > 4 {
			t.Errorf("20 sequential requests came over %d connections, want them reused", len(conns))
		}
	})

	t.Run("ready endpoints only, terminating ones when nothing else serves", func(t *testing.T) {
		v2Pods := e.podsOf(infraNS + "/" + v2)
		only := func(path, pod string) {
			t.Helper()
			for range 6 {
				reply := c.check(t, hostTo("endpoints.example", path, v2))
				if reply.Pod != pod {
					t.Fatalf("%s answered by %s, want only %s", path, reply.Pod, pod)
				}
			}
		}
		only("/mixed", v2Pods[0].name)
		only("/terminating", v2Pods[1].name)

		// An EndpointSlice change reaches the data plane.
		svc := infraNS + "/" + v2
		before := e.endpointYAML(svc, 0, "ready") + ", " + e.endpointYAML(svc, 1, "terminating")
		after := e.endpointYAML(svc, 0, "terminating") + ", " + e.endpointYAML(svc, 1, "ready")
		if !strings.Contains(e.files["10-case.yaml"], before) {
			t.Fatal("mixed-conditions endpoints not found in the manifest")
		}
		e.update(t, "10-case.yaml", strings.Replace(e.files["10-case.yaml"], before, after, 1))
		only("/mixed", v2Pods[1].name)
	})
}

// checkForwarded asserts the forwarding headers a backend saw: Portico's
// own X-Forwarded-*, nothing hop-by-hop and nothing forwarding-related the
// client made up.
func checkForwarded(t *testing.T, reply *echoReply, host, proto string) {
	t.Helper()
	got := http.Header(reply.Headers)
	for name, want := range map[string]string{
		"X-Forwarded-For":   "127.0.0.1",
		"X-Forwarded-Host":  host,
		"X-Forwarded-Proto": proto,
		"X-Kept":            "yes",
	} {
		if v := strings.Join(got.Values(name), ","); v != want {
			t.Errorf("backend saw %s %q, want %q", name, v, want)
		}
	}
	for _, name := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Forwarded"} {
		if v := got.Values(name); len(v) > 0 {
			t.Errorf("backend saw %s %q, want none", name, v)
		}
	}
}

// rawGet writes a GET request byte for byte and returns the echo reply.
func rawGet(t *testing.T, addr, target string, headers []string) *echoReply {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\n%s\r\n\r\n", target, strings.Join(headers, "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: status %d", target, resp.StatusCode)
	}
	var reply echoReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		t.Fatal(err)
	}
	return &reply
}

// wsEcho opens a WebSocket to path /ws through the gateway at addr and
// checks that a text and a binary message come back unchanged.
func wsEcho(t *testing.T, addr, host string) {
	t.Helper()
	cfg, err := websocket.NewConfig("ws://"+host+"/ws", "ws://gateway/"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	ws, err := websocket.NewClient(cfg, conn)
	if err != nil {
		t.Fatalf("WebSocket handshake: %v", err)
	}
	defer ws.Close()
	for _, msg := range []any{"Websocket Support!", []byte{1, 2, 3, 4, 5, 6, 7}} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatalf("send %T: %v", msg, err)
		}
		switch want := msg.(type) {
		case string:
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil {
				t.Fatalf("receive text: %v", err)
			}
			if got != want {
				t.Errorf("text echo %q, want %q", got, want)
			}
		case []byte:
			var got []byte
			if err := websocket.Message.Receive(ws, &got); err != nil {
				t.Fatalf("receive binary: %v", err)
			}
			if string(got) != string(want) {
				t.Errorf("binary echo %v, want %v", got, want)
			}
		}
	}
}

// servedCount counts the requests for target the pods of a Service
// received.
func (e *confEnv) servedCount(service, target string) int {
	n := 0
	for _, p := range e.podsOf(service) {
		for _, r := range p.requests() {
			if r.Path == target {
				n++
			}
		}
	}
	return n
}
