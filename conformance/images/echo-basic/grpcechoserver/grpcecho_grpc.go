package grpcechoserver

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serviceName is the echo service's full name on the wire: method paths are
// "/" + serviceName + "/" + method.
const serviceName = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"

// GrpcEchoClient calls the echo service's three methods, which differ only by
// name so that routes can tell them apart.
type GrpcEchoClient interface {
	Echo(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error)
	EchoTwo(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error)
	EchoThree(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error)
}

type grpcEchoClient struct{ cc grpc.ClientConnInterface }

// NewGrpcEchoClient returns a client of the echo service over cc.
func NewGrpcEchoClient(cc grpc.ClientConnInterface) GrpcEchoClient {
	return grpcEchoClient{cc}
}

func (c grpcEchoClient) call(ctx context.Context, method string, in *EchoRequest, opts []grpc.CallOption) (*EchoResponse, error) {
	out := new(EchoResponse)
	if err := c.cc.Invoke(ctx, "/"+serviceName+"/"+method, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

func (c grpcEchoClient) Echo(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error) {
	return c.call(ctx, "Echo", in, opts)
}

func (c grpcEchoClient) EchoTwo(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error) {
	return c.call(ctx, "EchoTwo", in, opts)
}

func (c grpcEchoClient) EchoThree(ctx context.Context, in *EchoRequest, opts ...grpc.CallOption) (*EchoResponse, error) {
	return c.call(ctx, "EchoThree", in, opts)
}

// GrpcEchoServer is what an echo backend implements. Embed
// UnimplementedGrpcEchoServer to answer Unimplemented for methods left out.
type GrpcEchoServer interface {
	Echo(context.Context, *EchoRequest) (*EchoResponse, error)
	EchoTwo(context.Context, *EchoRequest) (*EchoResponse, error)
	EchoThree(context.Context, *EchoRequest) (*EchoResponse, error)
	mustEmbedUnimplementedGrpcEchoServer()
}

// UnimplementedGrpcEchoServer answers every method with Unimplemented.
type UnimplementedGrpcEchoServer struct{}

func (UnimplementedGrpcEchoServer) Echo(context.Context, *EchoRequest) (*EchoResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Echo not implemented")
}

func (UnimplementedGrpcEchoServer) EchoTwo(context.Context, *EchoRequest) (*EchoResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method EchoTwo not implemented")
}

func (UnimplementedGrpcEchoServer) EchoThree(context.Context, *EchoRequest) (*EchoResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method EchoThree not implemented")
}

func (UnimplementedGrpcEchoServer) mustEmbedUnimplementedGrpcEchoServer() {}

// RegisterGrpcEchoServer serves srv's methods on s.
func RegisterGrpcEchoServer(s grpc.ServiceRegistrar, srv GrpcEchoServer) {
	s.RegisterService(&serviceDesc, srv)
}

// handler adapts one method of GrpcEchoServer to grpc's method handler.
func handler(method string, call func(GrpcEchoServer, context.Context, *EchoRequest) (*EchoResponse, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(EchoRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			s := srv.(GrpcEchoServer)
			if icpt == nil {
				return call(s, ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/" + method}
			return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return call(s, ctx, req.(*EchoRequest))
			})
		},
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*GrpcEchoServer)(nil),
	Methods: []grpc.MethodDesc{
		handler("Echo", GrpcEchoServer.Echo),
		handler("EchoTwo", GrpcEchoServer.EchoTwo),
		handler("EchoThree", GrpcEchoServer.EchoThree),
	},
	Metadata: "grpcecho.proto",
}
