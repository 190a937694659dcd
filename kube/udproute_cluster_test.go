package kube

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// udpEchoInNetns answers each datagram with name, ":" and the datagram,
// from the backends' network namespace; it returns its port.
func (f *clusterFixture) udpEchoInNetns(name string) int32 {
	f.T.Helper()
	c, err := f.Netns.ListenPacket("udp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	return int32(netip.MustParseAddrPort(c.LocalAddr().String()).Port())
}

// TestClusterUDPRoute: a UDPRoute created through the API server (its
// informer) is served on a UDP listener added to the Gateway, and gets its
// status from the status writer; one naming the HTTP listener is refused; the UDP listener lists
// UDPRoute among its kinds and counts the route.
func TestClusterUDPRoute(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	gws := f.Gateway.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "dns", f.udpEchoInNetns("dns"))
	httpPort := freeport.Port(t)
	createClassAndGateway(t, f.Gateway, httpPort)
	udpPort := freeport.Port(t)
	gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: "dns", Port: gwv1.PortNumber(udpPort), Protocol: gwv1.UDPProtocolType})
	if _, err := gws.Gateways("apps").Update(ctx, gw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "dns", Port: ptr.To(gwv1.PortNumber(80))}}
	for name, section := range map[string]string{"dns": "dns", "on-http": "http"} {
		mustCreate(t)(gws.UDPRoutes("apps").Create(ctx, &gwv1.UDPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: gwv1.UDPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName(section))}}},
				Rules:           []gwv1.UDPRouteRule{{BackendRefs: []gwv1.BackendRef{ref}}},
			},
		}, metav1.CreateOptions{}))
	}
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-a", nil)

	parentStatus := func(name string) (*gwv1.RouteParentStatus, error) {
		r, err := gws.UDPRoutes("apps").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for i := range r.Status.Parents {
			if ps := &r.Status.Parents[i]; ps.ControllerName == wellknown.ControllerName {
				return ps, nil
			}
		}
		return nil, fmt.Errorf("UDPRoute %s has no status of ours: %+v", name, r.Status)
	}
	kubetest.WaitFor(t, 20*time.Second, "UDPRoute dns accepted", func() error {
		ps, err := parentStatus("dns")
		if err != nil {
			return err
		}
		return errors.Join(conditionIs(ps.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", 1),
			conditionIs(ps.Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1))
	})
	kubetest.WaitFor(t, 20*time.Second, "UDPRoute on-http refused", func() error {
		ps, err := parentStatus("on-http")
		if err != nil {
			return err
		}
		return conditionIs(ps.Conditions, "Accepted", metav1.ConditionFalse, "NotAllowedByListeners", 1)
	})
	kubetest.WaitFor(t, 20*time.Second, "UDP listener status", func() error {
		gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(gw.Status.Listeners, func(l gwv1.ListenerStatus) bool { return l.Name == "dns" })
		if i < 0 {
			return fmt.Errorf("no status of listener dns: %+v", gw.Status.Listeners)
		}
		l := gw.Status.Listeners[i]
		if len(l.SupportedKinds) != 1 || l.SupportedKinds[0].Kind != "UDPRoute" || l.AttachedRoutes != 1 {
			return fmt.Errorf("listener dns supports %v with %d routes, want UDPRoute and 1 route", l.SupportedKinds, l.AttachedRoutes)
		}
		return conditionIs(l.Conditions, "Programmed", metav1.ConditionTrue, "Programmed", gw.Generation)
	})
	kubetest.WaitFor(t, 20*time.Second, "a datagram through the UDPRoute", func() error {
		c, err := net.Dial("udp", p.addr(int32(udpPort)))
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("q")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if got := string(buf[:n]); got != "dns:q" {
			return fmt.Errorf("answer %q, want dns:q", got)
		}
		return nil
	})
}
