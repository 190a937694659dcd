package pipeline

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/testkit/testyaml"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

const classYAML = testyaml.Class

// fileSource writes yaml to a file and returns a source over it.
func fileSource(t *testing.T, yaml string) *filesource.Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return filesource.New(path, zap.NewNop())
}

func newRuntime(t *testing.T) *proxy.Runtime {
	t.Helper()
	opts := proxy.DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = time.Second
	rt := proxy.New(opts, zaptest.NewLogger(t).Named("proxy"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt
}

func condition(t *testing.T, conds []metav1.Condition, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conds)
	}
	return *c
}

// TestBindFailureMarksOnlyTheGatewayOnThatAddress: with an address pool,
// two Gateways listen on the same port number, each on its own address.
// When the port cannot be bound on one of the addresses (something else
// holds it), only the Gateway given that address is not programmed; the
// other is programmed and serves.
func TestBindFailureMarksOnlyTheGatewayOnThatAddress(t *testing.T) {
	// Something else holds the port on 127.0.0.3.
	busy, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.3: %v", err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port))); err != nil {
		t.Skipf("port %d is taken on 127.0.0.2 too: %v", port, err)
	} else {
		ln.Close()
	}
	gateway := func(name, address string) string {
		return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: apps}
spec:
  gatewayClassName: portico
  addresses: [{type: IPAddress, value: %s}]
  listeners: [{name: http, port: %d, protocol: HTTP}]
---
`, name, address, port)
	}
	src := fileSource(t, classYAML+gateway("gw-a", "127.0.0.2")+gateway("gw-b", "127.0.0.3"))
	var got *status.Computed
	l := New(Options{Translate: translate.Settings{AddressPool: []string{"127.0.0.2", "127.0.0.3"}}, RetryAfter: time.Hour},
		src, newRuntime(t), nil, Outputs{Statuses: func(st *status.Computed, _ *status.Changed, _ *snapshot.Resources) { got = st }}, zaptest.NewLogger(t))

	err = l.Rebuild()
	if err == nil || !strings.Contains(err.Error(), "127.0.0.3") {
		t.Fatalf("Rebuild: %v, want the bind failure on 127.0.0.3", err)
	}
	if l.Ready() != nil {
		t.Error("not ready although the other Gateway was applied")
	}
	a := got.Gateways.At(types.NamespacedName{Namespace: "apps", Name: "gw-a"})
	b := got.Gateways.At(types.NamespacedName{Namespace: "apps", Name: "gw-b"})
	if c := condition(t, a.Conditions, "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("gw-a, on the address that bound: Programmed %+v", c)
	}
	if c := condition(t, a.Listeners[0].Conditions, "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("gw-a's listener: Programmed %+v", c)
	}
	if c := condition(t, b.Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "NoResources" || !strings.Contains(c.Message, "127.0.0.3") {
		t.Errorf("gw-b, on the address that did not bind: Programmed %+v", c)
	}
	if c := condition(t, b.Listeners[0].Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "Pending" {
		t.Errorf("gw-b's listener: Programmed %+v", c)
	}
	// gw-a serves: a request reaches Portico's port on its address (no
	// route: 404).
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.2:%d/", port))
	if err != nil {
		t.Fatalf("gw-a does not serve: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("gw-a answered %d, want 404 (no route)", resp.StatusCode)
	}
}

// TestRunNeedsAFirstSnapshot: a configuration that cannot be read at start
// stops Portico with the file named, rather than serving nothing.
func TestRunNeedsAFirstSnapshot(t *testing.T) {
	src := fileSource(t, "apiVersion: v1\nkind: Service\nmetadata: {name: x\n")
	l := New(Options{Holdoff: time.Millisecond, MaxDelay: time.Millisecond}, src, newRuntime(t), nil, Outputs{}, zaptest.NewLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "config.yaml") {
		t.Fatalf("Run: %v, want an error naming the file", err)
	}
	if l.Ready() == nil || l.Generation() != 0 {
		t.Errorf("ready %v at generation %d after a failed start", l.Ready(), l.Generation())
	}
}
