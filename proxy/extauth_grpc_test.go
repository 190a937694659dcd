package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"portico.dev/portico/config"
)

// authzPolicy decides as OPA's Envoy plugin would, on the input document
// that plugin gives: "Bearer good" passes with headers for the backend
// made of what the CheckRequest carried; "Bearer bad" is refused with a
// 401 of its own; anything else gets the default, false (403).
const authzPolicy = `package envoy.authz

default allow := false

allow := {
	"allowed": true,
	"headers": {
		"x-user": "alice",
		"x-seen": sprintf("%s %s %s %s", [
			input.attributes.request.http.method,
			input.attributes.request.http.path,
			input.attributes.request.http.host,
			input.attributes.source.address.socketAddress.address,
		]),
		"x-tenant-seen": object.get(input.attributes.request.http.headers, "x-tenant", "none"),
		"x-cookie-seen": object.get(input.attributes.request.http.headers, "cookie", "none"),
	},
} if {
	input.attributes.request.http.headers.authorization == "Bearer good"
}

allow := {
	"allowed": false,
	"http_status": 401,
	"body": "bad token",
	"headers": {"www-authenticate": "Bearer realm=\"opa\""},
} if {
	input.attributes.request.http.headers.authorization == "Bearer bad"
}
`

// startOPAAuthz runs the gRPC authorization service of hack/opa-authz.sh
// (OPA evaluating authzPolicy) on loopback and returns its address. It
// skips when the service cannot be built here, unless
// PORTICO_REQUIRE_REAL=1.
func startOPAAuthz(t *testing.T) string {
	t.Helper()
	return startOPAAuthzPolicy(t, authzPolicy)
}

// startOPAAuthzPolicy is startOPAAuthz deciding by the Rego policy rego.
func startOPAAuthzPolicy(t *testing.T, rego string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join("..", "hack", "opa-authz.sh")).Output()
	if err != nil {
		msg := "the OPA authorization service (hack/opa-authz.sh) cannot be built here: " + err.Error()
		if os.Getenv("PORTICO_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; PORTICO_REQUIRE_REAL=1 makes this a failure")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	bin := filepath.Join(lines[len(lines)-1], "opa-authz")
	policy := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(policy, []byte(rego), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := downAddress(t)
	cmd := exec.Command(bin, "-addr", addr, "-policy", policy)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		ready <- s.Scan() && strings.HasPrefix(s.Text(), "listening")
		for s.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the OPA authorization service did not start")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the OPA authorization service did not start within 30s")
	}
	return addr
}

func grpcExtAuthPolicy(addr string) *config.Security {
	return &config.Security{Policy: "ns/opa", ExtAuth: &config.ExtAuth{
		GRPC: true, Address: addr, Timeout: 2 * time.Second, HeadersToAuth: []string{"Authorization", "X-Tenant"},
	}}
}

func TestExtAuthGRPCAgainstOPA(t *testing.T) {
	addr := startOPAAuthz(t)
	g := startGuarded(t, grpcExtAuthPolicy(addr))

	code, _, body := g.do(t, "", "/orders?q=1", [][2]string{{"Authorization", "Bearer good"}, {"X-Tenant", "acme"}, {"Cookie", "s=1"}, {"X-User", "mallory"}})
	if code != http.StatusOK || body != "ok" {
		t.Fatalf("allowed by OPA: %d %q", code, body)
	}
	seen := g.backend.last(t)
	for _, want := range []string{"X-User: alice", "X-Seen: GET /orders?q=1 127.0.0.1:", " 127.0.0.1\r\n", "X-Tenant-Seen: acme", "X-Cookie-Seen: none"} {
		if !strings.Contains(seen, want) {
			t.Errorf("backend request lacks %q:\n%s", want, seen)
		}
	}
	if strings.Contains(seen, "mallory") {
		t.Errorf("the client's X-User reached the backend:\n%s", seen)
	}

	n := len(g.backend.requests())
	code, challenge, body := g.do(t, "", "/orders", [][2]string{{"Authorization", "Bearer bad"}})
	if code != http.StatusUnauthorized || body != "bad token" || challenge != `Bearer realm="opa"` {
		t.Fatalf("refused by OPA with its answer: %d %q %q", code, challenge, body)
	}
	if code, _, _ := g.do(t, "", "/orders", nil); code != http.StatusForbidden {
		t.Fatalf("refused by OPA's default: %d, want 403", code)
	}
	if len(g.backend.requests()) != n {
		t.Fatal("a refused request reached the backend")
	}
	if g.obs.count("ext_auth:allowed") != 1 || g.obs.count("ext_auth:denied") != 2 {
		t.Errorf("decisions %v", g.obs.decisions)
	}
}

func TestExtAuthGRPCDown(t *testing.T) {
	sec := grpcExtAuthPolicy(downAddress(t))
	sec.ExtAuth.Timeout = time.Second
	g := startGuarded(t, sec)
	if code, _, _ := g.do(t, "", "/x", [][2]string{{"Authorization", "Bearer good"}}); code != http.StatusForbidden {
		t.Fatalf("service down: %d, want 403", code)
	}
	if len(g.backend.requests()) != 0 {
		t.Fatal("the backend got a request")
	}
	sec.ExtAuth.FailOpen = true
	open := startGuarded(t, sec)
	if code, _, _ := open.do(t, "", "/x", nil); code != http.StatusOK {
		t.Fatalf("service down, failOpen: %d, want 200", code)
	}
}

func TestParseCheckResponseRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{{0xff}, {0x0a, 0x05, 0x08}, {0x12, 0x80}} {
		if _, err := parseCheckResponse(b); err == nil {
			t.Errorf("%x read as a CheckResponse", b)
		}
	}
}

// rawAuthz is a gRPC service on loopback that answers every call with
// answer (which may also block until the call ends).
func rawAuthz(t *testing.T, answer func(ctx context.Context) ([]byte, error)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		resp, err := answer(stream.Context())
		if err != nil {
			return err
		}
		return stream.SendMsg(&resp)
	}))
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func TestAttackExtAuthGRPCHostileService(t *testing.T) {
	deniedWith := func(body string) []byte {
		var denied []byte
		denied = protowire.AppendTag(denied, deniedBody, protowire.BytesType)
		denied = protowire.AppendString(denied, body)
		var st []byte
		st = protowire.AppendTag(st, statusCode, protowire.VarintType)
		st = protowire.AppendVarint(st, 7)
		var out []byte
		out = protowire.AppendTag(out, checkResponseStatus, protowire.BytesType)
		out = protowire.AppendBytes(out, st)
		out = protowire.AppendTag(out, checkResponseDenied, protowire.BytesType)
		return protowire.AppendBytes(out, denied)
	}
	for _, tc := range []struct {
		name   string
		answer func(ctx context.Context) ([]byte, error)
		code   int
		body   int // length of the body the client gets
	}{
		{"hangs", func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }, http.StatusForbidden, len("Forbidden\n")},
		{"answers over 1 MiB", func(context.Context) ([]byte, error) { return deniedWith(strings.Repeat("x", 2<<20)), nil }, http.StatusForbidden, len("Forbidden\n")},
		{"denies with a large body", func(context.Context) ([]byte, error) { return deniedWith(strings.Repeat("x", 512<<10)), nil }, http.StatusForbidden, extAuthBodyMax},
		{"answers garbage", func(context.Context) ([]byte, error) { return []byte{0x0a, 0xff}, nil }, http.StatusForbidden, len("Forbidden\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := grpcExtAuthPolicy(rawAuthz(t, tc.answer))
			sec.ExtAuth.Timeout = 300 * time.Millisecond
			g := startGuarded(t, sec)
			code, _, body := g.do(t, "", "/x", nil)
			if code != tc.code || len(body) != tc.body {
				t.Fatalf("%d with %d bytes, want %d with %d", code, len(body), tc.code, tc.body)
			}
			if len(g.backend.requests()) != 0 {
				t.Fatal("the backend got a request")
			}
		})
	}
}
