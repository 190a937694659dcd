// Package grpctest holds what the gRPC tests and the gRPC benchmark share:
// a codec that carries messages as raw bytes and an echo service built on
// it, so that real gRPC clients and servers talk through Portico without
// generated code.
package grpctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RawCodec passes messages (*[]byte) as they are.
type RawCodec struct{}

// Marshal returns the bytes *v holds.
func (RawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
}

// Unmarshal copies data into *v.
func (RawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// Name is the codec's content subtype: calls go as application/grpc+raw.
func (RawCodec) Name() string { return "raw" }

// EchoService is a service named service whose methods answer as name:
//
//   - Echo (unary): "name:message:x-tenant" (the x-tenant metadata, joined);
//   - Fail (unary): the status NotFound with name as its message;
//   - Sum (client stream): "name:" and the messages joined with "+";
//   - Count (server stream): "name:1" to "name:N" for the message N;
//   - Chat (bidirectional): "name:message" for each message, as it comes.
//
// A server serving it needs grpc.ForceServerCodec(RawCodec{}).
func EchoService(service, name string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				md, _ := metadata.FromIncomingContext(ctx)
				out := []byte(name + ":" + string(in) + ":" + strings.Join(md.Get("x-tenant"), ","))
				return &out, nil
			}},
			{MethodName: "Fail", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return nil, status.Error(codes.NotFound, name)
			}},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Sum", ClientStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
				var parts []string
				for {
					m, err := recv(s)
					if errors.Is(err, io.EOF) {
						return send(s, name+":"+strings.Join(parts, "+"))
					}
					if err != nil {
						return err
					}
					parts = append(parts, m)
				}
			}},
			{StreamName: "Count", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
				m, err := recv(s)
				if err != nil {
					return err
				}
				n, _ := strconv.Atoi(m)
				for i := 1; i <= n; i++ {
					if err := send(s, name+":"+strconv.Itoa(i)); err != nil {
						return err
					}
				}
				return nil
			}},
			{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
				for {
					m, err := recv(s)
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						return err
					}
					if err := send(s, name+":"+m); err != nil {
						return err
					}
				}
			}},
		},
	}
}

func recv(s grpc.ServerStream) (string, error) {
	var b []byte
	err := s.RecvMsg(&b)
	return string(b), err
}

func send(s grpc.ServerStream, msg string) error {
	b := []byte(msg)
	return s.SendMsg(&b)
}

// Unary calls method with msg (and metadata md, as key-value pairs) and
// returns the answer.
func Unary(ctx context.Context, cc *grpc.ClientConn, method, msg string, md ...string) (string, error) {
	in, out := []byte(msg), []byte(nil)
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	err := cc.Invoke(ctx, method, &in, &out, grpc.ForceCodec(RawCodec{})) //nolint:staticcheck // RawCodec has no V2 form
	return string(out), err
}
