package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// backend serves, inside n, a body unique to this call and the remote
// address it saw. It stops when the test ends.
func backend(t *testing.T, n *Netns) (addr netip.AddrPort, body string) {
	t.Helper()
	l, err := n.Listen("tcp", n.AddrPort(0))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	body = hex.EncodeToString(b)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", body, r.RemoteAddr)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("backend: %v", err)
		}
	}()
	// Registered after NewNetns's cleanup, so it runs first: the socket
	// must be closed before the namespace is deleted.
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return netip.MustParseAddrPort(l.Addr().String()), body
}

func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}

func TestNetnsServesHTTP(t *testing.T) {
	n := NewNetns(t, t.Name())
	if !netnsPool.Contains(n.Addr) || !netnsPool.Contains(n.HostAddr) || n.Addr == n.HostAddr {
		t.Fatalf("addresses %v (netns), %v (host) not distinct in %v", n.Addr, n.HostAddr, netnsPool)
	}

	addr, body := backend(t, n)
	if addr.Addr() != n.Addr {
		t.Fatalf("backend listens on %v, want %v", addr, n.Addr)
	}
	got := get(t, "http://"+addr.String()+"/")
	want := body + " " + n.HostAddr.String() + ":"
	if !strings.HasPrefix(got, want) {
		t.Errorf("backend answered %q, want %q<port>: the request must come over the veth pair", got, want)
	}

	// The namespace's address does not exist on the host.
	if l, err := net.Listen("tcp", n.AddrPort(0)); err == nil {
		l.Close()
		t.Errorf("listening on %v outside the namespace succeeded", n.Addr)
	}

	// A command run inside sees the namespace's network, not the host's.
	out, err := n.Command(t.Context(), "ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in netns: %v: %s", err, out)
	}
	if !strings.Contains(string(out), " "+n.Addr.String()+"/30 ") {
		t.Errorf("ip addr in netns lacks %v/30:\n%s", n.Addr, out)
	}
	if strings.Contains(string(out), " "+n.HostAddr.String()+"/30 ") {
		t.Errorf("ip addr in netns shows the host's end %v:\n%s", n.HostAddr, out)
	}
}

func TestNetnsDeleteRemovesEverything(t *testing.T) {
	NeedNetns(t)
	a, err := CreateNetns(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := CreateNetns(t.Context(), "b")
	if err != nil {
		a.Delete()
		t.Fatal(err)
	}
	defer b.Delete()
	pa, _ := a.Addr.Prefix(30)
	pb, _ := b.Addr.Prefix(30)
	if pa == pb {
		t.Errorf("two namespaces share %v", pa)
	}
	if err := a.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/netns/" + a.Name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still exists after Delete (stat: %v)", a.Name, err)
	}
	if _, err := net.InterfaceByName(a.hostLink); err == nil {
		t.Errorf("host link %s still exists after Delete", a.hostLink)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		if ipn, ok := ad.(*net.IPNet); ok && ipn.IP.Equal(net.IP(a.HostAddr.AsSlice())) {
			t.Errorf("host still has %v after Delete", a.HostAddr)
		}
	}
}

// The reason for Netns: the API server takes an EndpointSlice that points at
// a backend in a namespace, but not one that points at loopback, and the
// address it stores is one the host reaches.
func TestEndpointSliceToNetnsBackend(t *testing.T) {
	NeedNetns(t)
	env := Start(t)
	ctx := t.Context()
	kc, _ := Clients(t, env.Config)
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	n := NewNetns(t, "backend")
	addr, body := backend(t, n)

	slice := func(name, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: testNS, Name: name,
				Labels: map[string]string{discoveryv1.LabelServiceName: "backend"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(addr.Port()))}},
		}
	}
	_, err := kc.DiscoveryV1().EndpointSlices(testNS).Create(ctx, slice("loopback", "127.0.0.1"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("EndpointSlice with 127.0.0.1: got %v, want Invalid", err)
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(testNS).Create(ctx, slice("netns", n.Addr.String()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("EndpointSlice with %v: %v", n.Addr, err)
	}

	got, err := kc.DiscoveryV1().EndpointSlices(testNS).Get(ctx, "netns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(got.Endpoints[0].Addresses[0], fmt.Sprint(*got.Ports[0].Port))
	if resp := get(t, "http://"+target+"/"); !strings.HasPrefix(resp, body+" ") {
		t.Errorf("backend at %s answered %q, want body %q", target, resp, body)
	}
}

// Listen must leave the calling goroutine's thread in the host namespace.
func TestNetnsListenLeavesHostNamespace(t *testing.T) {
	n := NewNetns(t, "leave")
	before, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		l, err := n.Listen("tcp", n.AddrPort(0))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	// Many goroutines on many threads; none may find itself in the netns.
	errc := make(chan error, 50)
	for range 50 {
		go func() {
			cur, err := os.Readlink("/proc/thread-self/ns/net")
			if err == nil && cur != before {
				err = fmt.Errorf("a thread is in %s, want %s", cur, before)
			}
			errc <- err
		}()
	}
	for range 50 {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
