package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube"
)

// lockedBuffer is the log sink of a serve running in the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func httpGet(url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestServeClusterMode runs "portico serve" without --config against a real
// API server: it becomes ready, leads, binds the Gateway's port, reports
// the address given by flag, exposes its metrics, creates the session key
// Secret and stops cleanly.
func TestServeClusterMode(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	kc, gc := apiClients(t, env)
	for _, ns := range []string{"portico-system", "apps"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, port := freeport.Addr(t)
	adminAddr, _ := freeport.Addr(t)
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.GatewayV1().Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: []gwv1.Listener{
			{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(serveCtx, []string{
			"--kubeconfig", filepath.Join(env.Dir, "kubeconfig"),
			"--namespace", "portico-system",
			"--identity", "cmd-test",
			"--admin-address", adminAddr,
			"--bind-address", "127.0.0.1",
			"--gateway-address", "192.0.2.7, lb.example.net",
			"--leader-election-lease-duration", "3s",
			"--leader-election-renew-deadline", "2s",
			"--leader-election-retry-period", "250ms",
			"--drain-timeout", "1s",
		}, logs)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
		if t.Failed() {
			t.Logf("portico log:\n%s", logs.String())
		}
	})

	admin := "http://" + adminAddr
	waitUntil(t, "ready", func() error {
		code, body, err := httpGet(admin+"/readyz", "")
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
	})
	waitUntil(t, "leading, in the metrics", func() error {
		_, body, err := httpGet(admin+"/metrics", "")
		if err != nil {
			return err
		}
		for _, want := range []string{"portico_leader 1", "portico_config_applies_total{result=\"ok\"}", "portico_status_writes_total{kind=\"Gateway\",result=\"ok\"}"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %q in /metrics", want)
			}
		}
		return nil
	})
	// The Gateway's port is bound: an unknown host gets a 404 from Portico.
	if code, _, err := httpGet("http://127.0.0.1:"+strconv.Itoa(port)+"/", "nothing.example.com"); err != nil || code != 404 {
		t.Errorf("Gateway port: %d, %v; want 404", code, err)
	}
	waitUntil(t, "Gateway status", func() error {
		gw, err := gc.GatewayV1().Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gw.Status.Conditions, "Programmed") {
			return fmt.Errorf("not programmed: %+v", gw.Status.Conditions)
		}
		a := gw.Status.Addresses
		if len(a) != 2 || a[0].Value != "192.0.2.7" || *a[0].Type != gwv1.IPAddressType || a[1].Value != "lb.example.net" || *a[1].Type != gwv1.HostnameAddressType {
			return fmt.Errorf("addresses %+v", a)
		}
		return nil
	})
	// The replica made the key every replica seals sessions with.
	if s, err := kc.CoreV1().Secrets("portico-system").Get(ctx, "portico-session-key", metav1.GetOptions{}); err != nil || len(s.Data[kube.SessionKeyField]) != 32 {
		t.Errorf("session key Secret: %v", err)
	}
	if strings.Contains(logs.String(), "no key shared between replicas") {
		t.Error("the session key was not shared")
	}
	// client-go's own log lines go through Portico's logger.
	if !strings.Contains(logs.String(), "client-go") {
		t.Error("client-go logs do not go through Portico's logger")
	}

	cancel()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v on shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, _, err := httpGet(admin+"/healthz", ""); err == nil {
		t.Error("admin port still open after serve returned")
	}
}

func TestServeFlagErrors(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"cluster flag in standalone mode": {[]string{"--config", t.TempDir(), "--gateway-service", "a/b"}, "cluster mode"},
		"bad gateway service":             {[]string{"--kubeconfig", writeKubeconfig(t), "--gateway-service", "nonamespace"}, "--gateway-service"},
		"missing kubeconfig":              {[]string{"--kubeconfig", filepath.Join(t.TempDir(), "none")}, "--kubeconfig"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			err := serve(context.Background(), tc.args, &logs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve %v = %v, want an error about %s", tc.args, err, tc.want)
			}
		})
	}
}

// writeKubeconfig writes a kubeconfig for a server that is never contacted.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitUntil(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apiClients are the core and Gateway API clients of env's API server.
func apiClients(t *testing.T, env *kubetest.Env) (*kubernetes.Clientset, *gatewayclient.Clientset) {
	t.Helper()
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := gatewayclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return kc, gc
}
