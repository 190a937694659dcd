package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/grpctest"
	"portico.dev/portico/internal/testkit/kubetest"
)

// grpcBackend serves grpctest.EchoService (test.Echo, as name) over h2c
// in the fixture's network namespace and returns its port.
func (f *clusterFixture) grpcBackend(name string) int32 {
	f.T.Helper()
	ln, err := f.Netns.Listen("tcp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(grpctest.RawCodec{})) //nolint:staticcheck // RawCodec has no V2 form
	srv.RegisterService(grpctest.EchoService("test.Echo", name), nil)
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	f.T.Cleanup(srv.Stop)
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// TestClusterGRPCRoute: a GRPCRoute created through the API server is
// served (h2c from the client, h2c to a backend whose Service port says
// nothing of HTTP/2) and gets its status; a GRPCRoute naming a missing
// listener is refused; the listener lists GRPCRoute among its kinds and
// counts the route; a deleted route stops serving.
func TestClusterGRPCRoute(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	gws := f.Gateway.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "echo", f.grpcBackend("backend-a"))
	httpPort := freeport.Port(t)
	createClassAndGateway(t, f.Gateway, httpPort)
	ref := gwv1.GRPCBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
		Name: "echo", Port: ptr.To(gwv1.PortNumber(80)),
	}}}
	mustCreate(t)(gws.GRPCRoutes("apps").Create(ctx, &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "echo"},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gwv1.Hostname{"grpc.example.com"},
			Rules: []gwv1.GRPCRouteRule{{
				Matches:     []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: ptr.To("test.Echo")}}},
				BackendRefs: []gwv1.GRPCBackendRef{ref},
			}},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.GRPCRoutes("apps").Create(ctx, &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "nowhere"},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName("nope"))}}},
			Rules:           []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{ref}}},
		},
	}, metav1.CreateOptions{}))
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-a", nil)

	parentStatus := func(name string) (*gwv1.RouteParentStatus, error) {
		r, err := gws.GRPCRoutes("apps").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for i := range r.Status.Parents {
			if ps := &r.Status.Parents[i]; ps.ControllerName == wellknown.ControllerName {
				return ps, nil
			}
		}
		return nil, fmt.Errorf("GRPCRoute %s has no status of ours: %+v", name, r.Status)
	}
	kubetest.WaitFor(t, 20*time.Second, "GRPCRoute echo accepted", func() error {
		ps, err := parentStatus("echo")
		if err != nil {
			return err
		}
		return errors.Join(conditionIs(ps.Conditions, "Accepted", metav1.ConditionTrue, "Accepted", 1),
			conditionIs(ps.Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs", 1))
	})
	kubetest.WaitFor(t, 20*time.Second, "GRPCRoute nowhere refused", func() error {
		ps, err := parentStatus("nowhere")
		if err != nil {
			return err
		}
		return conditionIs(ps.Conditions, "Accepted", metav1.ConditionFalse, "NoMatchingParent", 1)
	})
	kubetest.WaitFor(t, 20*time.Second, "listener status", func() error {
		gw, err := gws.Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(gw.Status.Listeners) != 1 {
			return fmt.Errorf("listeners %+v", gw.Status.Listeners)
		}
		l := gw.Status.Listeners[0]
		if !slices.ContainsFunc(l.SupportedKinds, func(k gwv1.RouteGroupKind) bool { return k.Kind == "GRPCRoute" }) || l.AttachedRoutes != 1 {
			return fmt.Errorf("listener supports %v with %d routes, want GRPCRoute among them and 1 route", l.SupportedKinds, l.AttachedRoutes)
		}
		return nil
	})

	cc, err := grpc.NewClient(p.addr(int32(httpPort)), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("grpc.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	call := func() (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return grpctest.Unary(cctx, cc, "/test.Echo/Echo", "hi")
	}
	if got, err := call(); err != nil || got != "backend-a:hi:" {
		t.Fatalf("call through the GRPCRoute: %q, %v", got, err)
	}

	if err := gws.GRPCRoutes("apps").Delete(ctx, "echo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 20*time.Second, "deleted GRPCRoute no longer served", func() error {
		if _, err := call(); status.Code(err) != codes.Unimplemented {
			return fmt.Errorf("call: %v, want Unimplemented", err)
		}
		return nil
	})
}
