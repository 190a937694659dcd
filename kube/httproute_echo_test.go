package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// echoReply is what an echo pod answers: the request as it arrived, and
// who answered it.
type echoReply struct {
	Path      string              `json:"path"` // the request target as received (RequestURI)
	Host      string              `json:"host"`
	Method    string              `json:"method"`
	Proto     string              `json:"proto"`
	Headers   map[string][]string `json:"headers"`
	Namespace string              `json:"namespace"`
	Service   string              `json:"service"`
	Pod       string              `json:"pod"`
	Remote    string              `json:"-"` // the peer address the pod saw
}

// echoPod plays one replica of a backend Deployment: an HTTP/1.1 server
// (which also accepts WebSockets on /ws) and an HTTP/2 cleartext server on
// another port of the same address.
//
// Query parameters steer it the way the conformance tests need:
//   - delay=<duration> waits before answering;
//   - under /retry/, uuid=<id>&succeedAfter=<n> fails the first n requests
//     of that id, with responseCode=<code> or else by resetting the
//     connection, and echoes after that.
//
// The header X-Echo-Set-Header: "name:value,name:value" makes it send those
// response headers, names kept exactly as written.
type echoPod struct {
	namespace, service, name string
	ip                       string
	httpPort, h2cPort        int

	mu      sync.Mutex
	seen    []echoReply    // every request received, in order
	retries map[string]int // failed attempts per retry uuid
}

// podIP picks a random loopback address for a pod, so that all pods of a
// Service can listen on the same ports as they would in a cluster. A clash
// with another test's pod shows as EADDRINUSE, and startEchoPods tries
// again.
func podIP() string {
	return fmt.Sprintf("127.%d.%d.%d", 2+rand.N(250), rand.N(256), 1+rand.N(250))
}

// startEchoPods starts the replicas of one Service. All of them listen on
// the same two ports, each on its own loopback address.
func startEchoPods(t testing.TB, namespace, service string, replicas int) []*echoPod {
	t.Helper()
	for try := 0; try < 20; try++ {
		pods, err := tryEchoPods(t, namespace, service, replicas)
		if err == nil {
			return pods
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	t.Fatalf("no free ports for %s/%s", namespace, service)
	return nil
}

func tryEchoPods(t testing.TB, namespace, service string, replicas int) ([]*echoPod, error) {
	var pods []*echoPod
	var listeners []net.Listener
	fail := func(err error) ([]*echoPod, error) {
		for _, l := range listeners {
			l.Close()
		}
		return nil, err
	}
	httpPort, h2cPort := 0, 0
	for i := range replicas {
		p := &echoPod{
			namespace: namespace,
			service:   service,
			name:      fmt.Sprintf("%s-6f7c9d-%c%d", service, 'a'+rune(i), i),
			ip:        podIP(),
			retries:   map[string]int{},
		}
		hl, err := net.Listen("tcp", net.JoinHostPort(p.ip, strconv.Itoa(httpPort)))
		if err != nil {
			return fail(err)
		}
		listeners = append(listeners, hl)
		cl, err := net.Listen("tcp", net.JoinHostPort(p.ip, strconv.Itoa(h2cPort)))
		if err != nil {
			return fail(err)
		}
		listeners = append(listeners, cl)
		httpPort, h2cPort = hl.Addr().(*net.TCPAddr).Port, cl.Addr().(*net.TCPAddr).Port
		p.httpPort, p.h2cPort = httpPort, h2cPort
		pods = append(pods, p)
	}
	for i, p := range pods {
		p.serve(t, listeners[2*i], listeners[2*i+1])
	}
	return pods, nil
}

func (p *echoPod) serve(t testing.TB, httpLn, h2cLn net.Listener) {
	ws := websocket.Handler(func(ws *websocket.Conn) {
		_, _ = io.Copy(ws, ws)
	})
	// Not a ServeMux: it would clean paths like "/a/./b//c" and redirect,
	// and tests need to see paths exactly as they arrive.
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ws":
			ws.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, "/retry/"):
			p.retry(w, r)
		default:
			p.echo(w, r)
		}
	})
	h1 := &http.Server{Handler: p.recorded(mux), ReadHeaderTimeout: 5 * time.Second}

	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Protocols:         &protocols,
		Handler: p.recorded(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "this port speaks HTTP/2 cleartext only", http.StatusBadRequest)
				return
			}
			p.echo(w, r)
		})),
	}
	go h1.Serve(httpLn) //nolint:errcheck // ends with Close
	go h2c.Serve(h2cLn) //nolint:errcheck // ends with Close
	t.Cleanup(func() {
		h1.Close()
		h2c.Close()
	})
}

// recorded notes every request before next serves it.
func (p *echoPod) recorded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := p.reply(r)
		reply.Headers = r.Header.Clone()
		p.mu.Lock()
		p.seen = append(p.seen, reply)
		p.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (p *echoPod) reply(r *http.Request) echoReply {
	return echoReply{
		Path:      r.RequestURI,
		Host:      r.Host,
		Method:    r.Method,
		Proto:     r.Proto,
		Headers:   r.Header,
		Namespace: p.namespace,
		Service:   p.service,
		Pod:       p.name,
		Remote:    r.RemoteAddr,
	}
}

func (p *echoPod) echo(w http.ResponseWriter, r *http.Request) {
	reply := p.reply(r)
	if d := r.URL.Query().Get("delay"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(dur):
		case <-r.Context().Done():
			return
		}
	}
	body, err := json.Marshal(reply)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, list := range r.Header.Values("X-Echo-Set-Header") {
		for kv := range strings.SplitSeq(list, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(kv), ":")
			if name == "" {
				continue
			}
			// Written into the map directly so the name goes out as the
			// test spelled it, lowercase included.
			w.Header()[name] = append(w.Header()[name], value)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (p *echoPod) retry(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("uuid")
	succeedAfter, err := strconv.Atoi(q.Get("succeedAfter"))
	if id == "" || err != nil {
		http.Error(w, "uuid and succeedAfter are required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	failing := p.retries[id] < succeedAfter
	if failing {
		p.retries[id]++
	}
	p.mu.Unlock()
	if !failing {
		p.echo(w, r)
		return
	}
	if code, err := strconv.Atoi(q.Get("responseCode")); err == nil {
		w.WriteHeader(code)
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST, not FIN
	}
	conn.Close()
}

// requests returns the requests the pod has received, in order.
func (p *echoPod) requests() []echoReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]echoReply(nil), p.seen...)
}
