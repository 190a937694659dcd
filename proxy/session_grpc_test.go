package proxy

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/grpctest"
	"portico.dev/portico/routing"
)

// TestSessionGRPCHeader: a GRPCRoute rule's header session over an h2c
// Service of 4 endpoints (picked round robin without it): the first
// call's answer carries the session in its headers, and 200 calls sending
// it back are answered by the same endpoint without a new one. The same
// holds when the session is the Service's (an XBackendTrafficPolicy's)
// and the rule has none.
func TestSessionGRPCHeader(t *testing.T) {
	typ := gwv1.HeaderBasedSessionPersistence
	sp := &gwv1.SessionPersistence{Type: &typ, Header: &gwv1.HeaderConfig{Name: "x-session"}}
	t.Run("rule", func(t *testing.T) { grpcSession(t, sp, routing.Service{}) })
	t.Run("service", func(t *testing.T) { grpcSession(t, nil, routing.Service{Session: mustSession(t, sp, "")}) })
}

// grpcSession runs TestSessionGRPCHeader with the rule's session sp and
// the Service svc.
func grpcSession(t *testing.T, sp *gwv1.SessionPersistence, svc routing.Service) {
	svc.Ports = []routing.ServicePort{{Name: "grpc", Port: 80}}
	var addrs []string
	for i := range 4 {
		addrs = append(addrs, grpcBackend(t, "g"+strconv.Itoa(i), nil, "test.Echo"))
	}
	port := gwv1.PortNumber(80)
	route := &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", Generation: 1},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules: []gwv1.GRPCRouteRule{{
				BackendRefs:        []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: &port}}}},
				SessionPersistence: sp,
			}},
		},
	}
	same := gwv1.NamespacesFromSame
	out := routing.Compile(routing.Input{
		ControllerName: "portico.dev/gateway-controller",
		Listeners: []routing.Listener{{
			Gateway: types.NamespacedName{Namespace: "ns", Name: "gw"},
			Parent:  routing.Parent{Kind: "Gateway", Namespace: "ns", Name: "gw"},
			Name:    "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
			AllowedRoutes:  gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &same}},
			SupportedKinds: []gwv1.RouteGroupKind{{Kind: "GRPCRoute"}},
			Accepted:       true,
		}},
		Parents:    map[routing.Parent]bool{{Kind: "Gateway", Namespace: "ns", Name: "gw"}: true},
		GRPCRoutes: []*gwv1.GRPCRoute{route},
		Services:   map[types.NamespacedName]routing.Service{{Namespace: "ns", Name: "svc"}: svc},
	})
	if out.Tables[0] == nil {
		t.Fatalf("GRPCRoute did not attach: %+v", out.GRPCRouteParents)
	}
	l := &config.Listener{Key: "Gateway/ns/gw/http", Routes: out.Tables[0]}
	p := freePort(t)
	cfg := &config.Config{
		Ports:     []*config.Port{{Number: int32(p), Protocol: config.HTTP, Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}},
		Endpoints: config.NewEndpointTable(map[config.BackendKey]*config.Endpoints{{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}: config.NewEndpoints(addrs...)}),
	}
	rt := newRuntime(t)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	cc := grpcClient(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(session string) (by, opened string) {
		t.Helper()
		c := ctx
		if session != "" {
			c = metadata.AppendToOutgoingContext(ctx, "x-session", session)
		}
		in, reply := []byte("hi"), []byte(nil)
		var hdr metadata.MD
		if err := cc.Invoke(c, "/test.Echo/Echo", &in, &reply, grpc.ForceCodec(grpctest.RawCodec{}), grpc.Header(&hdr)); err != nil { //nolint:staticcheck // RawCodec has no V2 form
			t.Fatalf("call: %v", err)
		}
		by, _, _ = strings.Cut(string(reply), ":")
		if v := hdr.Get("x-session"); len(v) > 0 {
			opened = v[0]
		}
		return by, opened
	}
	first, session := call("")
	if session == "" {
		t.Fatal("the first answer opened no session")
	}
	for i := range 200 {
		if by, opened := call(session); by != first || opened != "" {
			t.Fatalf("call %d answered by %s (new session %q), the session's endpoint is %s", i, by, opened, first)
		}
	}
}
