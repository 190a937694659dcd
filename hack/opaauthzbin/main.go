// Command opaauthz is the external authorization service Portico's tests
// ask over gRPC: Envoy's envoy.service.auth.v3.Authorization/Check, served
// with the message types of Envoy's own Go module and decided by a Rego
// policy evaluated by OPA, the way OPA's Envoy plugin decides (the same
// input document and the same shapes of result), so that Portico's side
// of the protocol is checked against the real types and a real OPA.
// hack/opa-authz.sh builds it into the cache of test components.
//
// The policy's query (-query, default data.envoy.authz.allow) gives a
// boolean, or an object with "allowed", "headers" (set on the request
// when allowed, on the answer when not), "response_headers_to_add",
// "http_status" and "body".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"encoding/json"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/open-policy-agent/opa/v1/rego"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

type server struct {
	authv3.UnimplementedAuthorizationServer
	query rego.PreparedEvalQuery
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9191", "address to listen on")
	policy := flag.String("policy", "", "Rego policy file")
	query := flag.String("query", "data.envoy.authz.allow", "Rego query of the decision")
	flag.Parse()
	if *policy == "" {
		log.Fatal("opaauthz: -policy is required")
	}
	src, err := os.ReadFile(*policy)
	if err != nil {
		log.Fatalf("opaauthz: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pq, err := rego.New(rego.Query(*query), rego.Module(*policy, string(src))).PrepareForEval(ctx)
	if err != nil {
		log.Fatalf("opaauthz: policy: %v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("opaauthz: %v", err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, &server{query: pq})
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	fmt.Println("listening", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		log.Fatalf("opaauthz: %v", err)
	}
}

// Check evaluates the policy with the request as OPA's Envoy plugin
// gives it: the CheckRequest as JSON, with parsed_path and parsed_query.
func (s *server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	js, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	var input map[string]any
	if err := json.Unmarshal(js, &input); err != nil {
		return nil, err
	}
	path := req.GetAttributes().GetRequest().GetHttp().GetPath()
	p, q, _ := strings.Cut(path, "?")
	parsed := []any{}
	for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		parsed = append(parsed, seg)
	}
	input["parsed_path"] = parsed
	query := map[string]any{}
	for _, kv := range strings.Split(q, "&") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			query[k] = append(asList(query[k]), v)
		}
	}
	input["parsed_query"] = query
	rs, err := s.query.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return nil, err
	}
	allowed, headers, respHeaders, code, body := false, map[string]any{}, map[string]any{}, 403, ""
	if len(rs) > 0 && len(rs[0].Expressions) > 0 {
		switch v := rs[0].Expressions[0].Value.(type) {
		case bool:
			allowed = v
		case map[string]any:
			allowed, _ = v["allowed"].(bool)
			if h, ok := v["headers"].(map[string]any); ok {
				headers = h
			}
			if h, ok := v["response_headers_to_add"].(map[string]any); ok {
				respHeaders = h
			}
			if n, ok := v["http_status"].(json.Number); ok {
				if i, err := n.Int64(); err == nil {
					code = int(i)
				}
			}
			body, _ = v["body"].(string)
		}
	}
	if allowed {
		return &authv3.CheckResponse{
			Status:       &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: headerOptions(headers), ResponseHeadersToAdd: headerOptions(respHeaders)}},
		}, nil
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)}, Headers: headerOptions(headers), Body: body,
		}},
	}, nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func headerOptions(h map[string]any) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for k, v := range h {
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: fmt.Sprint(v)}})
	}
	return out
}
