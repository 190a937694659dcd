// Package loadbalancer stands in for a cloud load balancer on the test
// cluster: it gives every Service of type LoadBalancer an address from a
// pool of host addresses (the one spec.loadBalancerIP asks for when it is
// a free pool address; none when it asks for another), writes it into the
// Service's status.loadBalancer.ingress, and forwards TCP connections (and
// UDP datagrams, per client address, for a port of protocol UDP) to each
// of the Service's ports on that address to a ready endpoint, as read
// from its EndpointSlices.
package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Config is what a Balancer needs.
type Config struct {
	Client kubernetes.Interface
	// Pool are host addresses to hand out; they must exist on the host.
	Pool []netip.Addr
	Logf func(format string, args ...any)
}

// Balancer serves LoadBalancer Services. Run it.
type Balancer struct {
	cfg       Config
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	mu        sync.Mutex
	assigned  map[string]netip.Addr // by namespace/name
	listeners map[string][]io.Closer
	next      atomic.Uint64
}

// New returns a Balancer.
func New(cfg Config) *Balancer {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Balancer{cfg: cfg, assigned: map[string]netip.Addr{}, listeners: map[string][]io.Closer{}}
}

// Run serves until ctx ends.
func (b *Balancer) Run(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(b.cfg.Client, 0)
	b.services = f.Core().V1().Services().Lister()
	b.slices = f.Discovery().V1().EndpointSlices().Lister()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() }}
	if _, err := f.Core().V1().Services().Informer().AddEventHandler(h); err != nil {
		return err
	}
	_ = f.Discovery().V1().EndpointSlices().Informer()
	f.Start(ctx.Done())
	defer f.Shutdown()
	f.WaitForCacheSync(ctx.Done())
	defer b.closeAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		if err := b.sync(ctx); err != nil {
			b.cfg.Logf("load balancer: %v", err)
			time.AfterFunc(time.Second, poke)
		}
	}
}

// sync serves every LoadBalancer Service and stops serving the others.
func (b *Balancer) sync(ctx context.Context) error {
	svcs, err := b.services.List(labels.Everything())
	if err != nil {
		return err
	}
	want := map[string]*corev1.Service{}
	for _, s := range svcs {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass == nil {
			want[s.Namespace+"/"+s.Name] = s
		}
	}
	b.mu.Lock()
	for key := range b.assigned {
		if want[key] == nil {
			b.release(key)
		}
	}
	b.mu.Unlock()
	var errs []error
	for key, s := range want {
		if err := b.serve(ctx, key, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// release stops serving key and frees its address (b.mu held).
func (b *Balancer) release(key string) {
	for _, ln := range b.listeners[key] {
		ln.Close()
	}
	delete(b.listeners, key)
	delete(b.assigned, key)
}

func (b *Balancer) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key := range b.assigned {
		b.release(key)
	}
}

// address is the pool address of a Service: the one it has, else the one
// it asks for when that is free, else the first free one. ok is false
// when it asks for an address outside the pool or taken.
func (b *Balancer) address(key string, s *corev1.Service) (netip.Addr, bool) {
	if a, ok := b.assigned[key]; ok {
		return a, true
	}
	taken := map[netip.Addr]bool{}
	for _, a := range b.assigned {
		taken[a] = true
	}
	if s.Spec.LoadBalancerIP != "" {
		want, err := netip.ParseAddr(s.Spec.LoadBalancerIP)
		if err != nil || taken[want] {
			return netip.Addr{}, false
		}
		for _, a := range b.cfg.Pool {
			if a == want {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	// The pool's last addresses are for Services that ask for one.
	for _, a := range b.cfg.Pool[:max(len(b.cfg.Pool)-1, 0)] {
		if !taken[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// serve gives a Service its address, listens on its ports there and
// writes its status.
func (b *Balancer) serve(ctx context.Context, key string, s *corev1.Service) error {
	b.mu.Lock()
	addr, ok := b.address(key, s)
	if !ok {
		b.mu.Unlock()
		return nil // nothing to give: no ingress, as a cloud would leave it
	}
	fresh := b.assigned[key] != addr
	b.assigned[key] = addr
	if fresh || len(b.listeners[key]) != len(s.Spec.Ports) {
		for _, ln := range b.listeners[key] {
			ln.Close()
		}
		b.listeners[key] = nil
		for _, p := range s.Spec.Ports {
			hostPort := net.JoinHostPort(addr.String(), strconv.Itoa(int(p.Port)))
			if p.Protocol == corev1.ProtocolUDP {
				pc, err := net.ListenPacket("udp", hostPort)
				if err != nil {
					b.mu.Unlock()
					return err
				}
				b.listeners[key] = append(b.listeners[key], pc)
				go b.relay(pc, s.Namespace, s.Name, p)
				continue
			}
			ln, err := net.Listen("tcp", hostPort)
			if err != nil {
				b.mu.Unlock()
				return err
			}
			b.listeners[key] = append(b.listeners[key], ln)
			go b.accept(ln, s.Namespace, s.Name, p)
		}
	}
	b.mu.Unlock()
	if len(s.Status.LoadBalancer.Ingress) == 1 && s.Status.LoadBalancer.Ingress[0].IP == addr.String() {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := b.cfg.Client.CoreV1().Services(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: new(corev1.LoadBalancerIPModeVIP)}}
		_, err = b.cfg.Client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (b *Balancer) accept(ln net.Listener, ns, name string, port corev1.ServicePort) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go b.forward(c, ns, name, port)
	}
}

// forward joins a client's connection to a ready endpoint of the Service
// port, picked in turn.
func (b *Balancer) forward(c net.Conn, ns, name string, port corev1.ServicePort) {
	defer c.Close()
	eps := b.endpoints(ns, name, port)
	if len(eps) == 0 {
		return
	}
	target := eps[int(b.next.Add(1))%len(eps)]
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
	<-done
}

// udpIdle ends a relayed UDP client's session after this long without a
// datagram from its endpoint.
const udpIdle = 30 * time.Second

// relay forwards the datagrams of each client address to a ready endpoint
// of the Service port (picked in turn, per client), and the endpoint's
// answers back, until pc closes.
func (b *Balancer) relay(pc net.PacketConn, ns, name string, port corev1.ServicePort) {
	var mu sync.Mutex
	sessions := map[string]net.Conn{}
	defer func() {
		mu.Lock()
		for _, u := range sessions {
			u.Close()
		}
		mu.Unlock()
	}()
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		mu.Lock()
		u := sessions[from.String()]
		if u == nil {
			eps := b.endpoints(ns, name, port)
			if len(eps) == 0 {
				mu.Unlock()
				continue
			}
			if u, err = net.Dial("udp", eps[int(b.next.Add(1))%len(eps)]); err != nil {
				mu.Unlock()
				continue
			}
			sessions[from.String()] = u
			go func() {
				back := make([]byte, 65536)
				for {
					_ = u.SetReadDeadline(time.Now().Add(udpIdle))
					k, err := u.Read(back)
					if err != nil {
						break
					}
					_, _ = pc.WriteTo(back[:k], from)
				}
				mu.Lock()
				delete(sessions, from.String())
				mu.Unlock()
				u.Close()
			}()
		}
		mu.Unlock()
		_, _ = u.Write(buf[:n])
	}
}

// endpoints are the ready addresses of a Service port, as host:port.
func (b *Balancer) endpoints(ns, name string, port corev1.ServicePort) []string {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})
	slices, err := b.slices.EndpointSlices(ns).List(sel)
	if err != nil {
		return nil
	}
	var out []string
	for _, es := range slices {
		var num int32
		for _, p := range es.Ports {
			if p.Port != nil && (p.Name == nil && port.Name == "" || p.Name != nil && *p.Name == port.Name) {
				num = *p.Port
			}
		}
		if num == 0 {
			continue
		}
		for _, e := range es.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(num))))
			}
		}
	}
	return out
}
