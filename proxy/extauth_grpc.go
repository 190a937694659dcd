package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"portico.dev/portico/config"
)

// External authorization over gRPC speaks Envoy's
// envoy.service.auth.v3.Authorization/Check, so that services written
// for Envoy (OPA's Envoy plugin among them) answer Portico unchanged.
// The few fields of CheckRequest and CheckResponse Portico uses are
// encoded here with protowire rather than with Envoy's generated types:
// those come with the whole of Envoy's API and its validation code, much
// weight for a dozen fields whose numbers the protocol will not change
// (measured, -s -w builds: importing envoy/service/auth/v3 grows a
// program of gRPC alone from 10.9 to 13.9 MB; this file and extauth.go
// grow Portico's binary by 56 KiB).
// The test service (hack/opaauthzbin) is built on the generated types,
// which checks these numbers against them.
const checkMethod = "/envoy.service.auth.v3.Authorization/Check"

// Field numbers of envoy.service.auth.v3 and the messages it uses.
const (
	checkRequestAttributes   = 1 // CheckRequest.attributes: AttributeContext
	attributesSource         = 1 // AttributeContext.source: Peer
	attributesDestination    = 2 // AttributeContext.destination: Peer
	attributesRequest        = 4 // AttributeContext.request: Request
	peerAddress              = 1 // Peer.address: config.core.v3.Address
	addressSocket            = 1 // Address.socket_address: SocketAddress
	socketAddress            = 2 // SocketAddress.address
	socketPort               = 3 // SocketAddress.port_value
	requestHTTP              = 2 // Request.http: HttpRequest
	httpID                   = 1
	httpMethod               = 2
	httpHeaders              = 3 // map<string, string>
	httpPath                 = 4
	httpHost                 = 5
	httpScheme               = 6
	httpQuery                = 7
	httpBody                 = 11
	httpSize                 = 9
	httpProtocol             = 10
	httpRawBody              = 12
	checkResponseStatus      = 1 // google.rpc.Status
	checkResponseDenied      = 2 // DeniedHttpResponse
	checkResponseOK          = 3 // OkHttpResponse
	statusCode               = 1
	deniedStatus             = 1 // type.v3.HttpStatus{code = 1}
	deniedHeaders            = 2 // repeated HeaderValueOption
	deniedBody               = 3
	okHeaders                = 2 // repeated HeaderValueOption
	okHeadersToRemove        = 5
	headerOptionHeader       = 1 // HeaderValueOption.header: HeaderValue
	headerKey                = 1
	headerValue              = 2
	headerRawValue           = 3
	extAuthGRPCMaxHeaders    = 64
	extAuthGRPCMaxAnswerSize = 1 << 20
)

// rawCodec hands gRPC the bytes encoded here.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// grpcConns are the connections to gRPC authorization services, by
// address; a gRPC connection multiplexes every check to its service.
type grpcConns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// maxGRPCConns bounds the services connected at once (addresses come
// from endpoints, which change): past it, every connection is closed.
const maxGRPCConns = 256

func (c *grpcConns) get(addr string, tlsSettings *config.BackendTLS) (*grpc.ClientConn, error) {
	key := addr
	creds := insecure.NewCredentials()
	if tlsSettings != nil {
		key += "\x00" + tlsSettings.ID
		creds = credentials.NewTLS(backendTLSConfig(tlsSettings, nil, "h2"))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc := c.conns[key]; cc != nil {
		return cc, nil
	}
	if c.conns == nil || len(c.conns) >= maxGRPCConns {
		for _, cc := range c.conns {
			cc.Close()
		}
		c.conns = map[string]*grpc.ClientConn{}
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(extAuthGRPCMaxAnswerSize)))
	if err != nil {
		return nil, fmt.Errorf("authorization service %s: %w", addr, err)
	}
	c.conns[key] = cc
	return cc, nil
}

// closeAll closes every connection.
func (c *grpcConns) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = nil
}

// closeExtAuth closes the connections to authorization services, when
// the data plane closes.
func (g *guard) closeExtAuth() {
	if g == nil {
		return
	}
	g.extAuthTransport.CloseIdleConnections()
	g.grpcConns.closeAll()
	g.extAuthTLSMu.Lock()
	defer g.extAuthTLSMu.Unlock()
	for _, t := range g.extAuthTLS {
		t.CloseIdleConnections()
	}
	g.extAuthTLS = nil
}

// checkAnswer is what a CheckResponse says.
type checkAnswer struct {
	allowed bool
	code    int // of a denial; 0: not said
	headers [][2]string
	remove  []string
	body    string
}

// askExtAuthGRPC sends r's CheckRequest and reads the answer.
func (g *guard) askExtAuthGRPC(ctx context.Context, r *http.Request, e *config.ExtAuth, addr string, body []byte) (*checkAnswer, error) {
	cc, err := g.grpcConns.get(addr, e.TLS)
	if err != nil {
		return nil, err
	}
	req := checkRequest(r, e, body)
	var resp []byte
	if err := cc.Invoke(ctx, checkMethod, &req, &resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("authorization service %s: no answer within %s", addr, e.Timeout)
		}
		return nil, fmt.Errorf("authorization service %s: %w", addr, err)
	}
	a, err := parseCheckResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("authorization service %s: %w", addr, err)
	}
	return a, nil
}

// checkRequest encodes r as a CheckRequest: the peer, the method, path
// (with the query, as Envoy sends it), host, scheme, protocol, the
// headers of e.HeadersToAuth (every header with e.AllHeadersToAuth) under
// lower-case names, as Envoy gives them, and body, the part of the body
// e forwards.
func checkRequest(r *http.Request, e *config.ExtAuth, body []byte) []byte {
	var h []byte
	str := func(b []byte, n protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	h = str(h, httpID, r.Header.Get("X-Request-Id"))
	h = str(h, httpMethod, r.Method)
	headers := []string{":authority", r.Host, ":method", r.Method, ":path", r.URL.RequestURI()}
	if e.AllHeadersToAuth {
		names := make([]string, 0, len(r.Header))
		for name := range r.Header {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			headers = append(headers, strings.ToLower(name), strings.Join(r.Header[name], ","))
		}
	} else {
		for _, name := range e.HeadersToAuth {
			if v, ok := r.Header[name]; ok {
				headers = append(headers, strings.ToLower(name), strings.Join(v, ","))
			}
		}
	}
	for i := 0; i < len(headers); i += 2 {
		var entry []byte
		entry = str(entry, 1, headers[i])
		entry = str(entry, 2, headers[i+1])
		h = protowire.AppendTag(h, httpHeaders, protowire.BytesType)
		h = protowire.AppendBytes(h, entry)
	}
	h = str(h, httpPath, r.URL.RequestURI())
	h = str(h, httpHost, r.Host)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h = str(h, httpScheme, scheme)
	h = str(h, httpQuery, r.URL.RawQuery)
	if r.ContentLength > 0 {
		h = protowire.AppendTag(h, httpSize, protowire.VarintType)
		h = protowire.AppendVarint(h, uint64(r.ContentLength))
	}
	if len(body) > 0 {
		// body for services that read text (OPA parses it), raw_body
		// for the bytes as they are.
		if utf8.Valid(body) {
			h = protowire.AppendTag(h, httpBody, protowire.BytesType)
			h = protowire.AppendBytes(h, body)
		}
		h = protowire.AppendTag(h, httpRawBody, protowire.BytesType)
		h = protowire.AppendBytes(h, body)
	}
	h = str(h, httpProtocol, r.Proto)
	request := protowire.AppendTag(nil, requestHTTP, protowire.BytesType)
	request = protowire.AppendBytes(request, h)
	var attrs []byte
	if a := requestClientAddr(r); a.IsValid() {
		attrs = protowire.AppendTag(attrs, attributesSource, protowire.BytesType)
		attrs = protowire.AppendBytes(attrs, peer(a.String(), clientPort(r.RemoteAddr)))
	}
	attrs = protowire.AppendTag(attrs, attributesRequest, protowire.BytesType)
	attrs = protowire.AppendBytes(attrs, request)
	out := protowire.AppendTag(nil, checkRequestAttributes, protowire.BytesType)
	return protowire.AppendBytes(out, attrs)
}

// peer encodes a Peer of a socket address.
func peer(ip string, port uint32) []byte {
	var sock []byte
	sock = protowire.AppendTag(sock, socketAddress, protowire.BytesType)
	sock = protowire.AppendString(sock, ip)
	sock = protowire.AppendTag(sock, socketPort, protowire.VarintType)
	sock = protowire.AppendVarint(sock, uint64(port))
	addr := protowire.AppendTag(nil, addressSocket, protowire.BytesType)
	addr = protowire.AppendBytes(addr, sock)
	p := protowire.AppendTag(nil, peerAddress, protowire.BytesType)
	return protowire.AppendBytes(p, addr)
}

func clientPort(remote string) uint32 {
	i := strings.LastIndexByte(remote, ':')
	var n uint32
	for _, c := range remote[i+1:] {
		if c < '0' || c > '9' || n > 65535 {
			return 0
		}
		n = n*10 + uint32(c-'0')
	}
	return n
}

// fields calls f with each field of a message; an error for bytes that
// are not one.
func fields(b []byte, f func(n protowire.Number, t protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return fmt.Errorf("malformed answer: %w", protowire.ParseError(l))
		}
		b = b[l:]
		var v []byte
		var x uint64
		switch t {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(n, t, b)
		}
		if l < 0 {
			return fmt.Errorf("malformed answer: %w", protowire.ParseError(l))
		}
		b = b[l:]
		if err := f(n, t, v, x); err != nil {
			return err
		}
	}
	return nil
}

// parseCheckResponse reads what Portico uses of a CheckResponse: the
// status code (0: allowed), and the denied or ok response.
func parseCheckResponse(b []byte) (*checkAnswer, error) {
	a := &checkAnswer{}
	code := uint64(0)
	headerOptions := func(v []byte) ([2]string, error) {
		var kv [2]string
		err := fields(v, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
			if n != headerOptionHeader || t != protowire.BytesType {
				return nil
			}
			return fields(v, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
				switch {
				case t != protowire.BytesType:
				case n == headerKey:
					kv[0] = string(v)
				case n == headerValue, n == headerRawValue && kv[1] == "":
					kv[1] = string(v)
				}
				return nil
			})
		})
		return kv, err
	}
	addHeader := func(v []byte) error {
		kv, err := headerOptions(v)
		if err != nil {
			return err
		}
		if len(a.headers) >= extAuthGRPCMaxHeaders {
			return fmt.Errorf("more than %d headers", extAuthGRPCMaxHeaders)
		}
		a.headers = append(a.headers, kv)
		return nil
	}
	err := fields(b, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
		if t != protowire.BytesType {
			return nil
		}
		switch n {
		case checkResponseStatus:
			return fields(v, func(n protowire.Number, t protowire.Type, _ []byte, x uint64) error {
				if n == statusCode && t == protowire.VarintType {
					code = x
				}
				return nil
			})
		case checkResponseDenied:
			return fields(v, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
				switch {
				case t != protowire.BytesType:
				case n == deniedStatus:
					return fields(v, func(n protowire.Number, t protowire.Type, _ []byte, x uint64) error {
						if n == 1 && t == protowire.VarintType && x < 1000 {
							a.code = int(x)
						}
						return nil
					})
				case n == deniedHeaders:
					return addHeader(v)
				case n == deniedBody:
					a.body = string(v[:min(len(v), extAuthBodyMax)])
				}
				return nil
			})
		case checkResponseOK:
			return fields(v, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
				switch {
				case t != protowire.BytesType:
				case n == okHeaders:
					return addHeader(v)
				case n == okHeadersToRemove:
					a.remove = append(a.remove, string(v))
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.allowed = code == 0
	return a, nil
}

// settableHeader reports whether an authorization service may set name
// on a request or an answer: a valid name that is not one of the
// connection's own.
func settableHeader(name string) bool {
	if !httpguts.ValidHeaderFieldName(name) {
		return false
	}
	switch strings.ToLower(name) {
	case "host", "authority", "connection", "content-length", "transfer-encoding", "te", "upgrade", "keep-alive", "proxy-connection", "trailer":
		return false
	}
	return true
}
