package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// serveInTest runs "portico serve" with args and JSON logs until the test
// ends; the logs are returned.
func serveInTest(t *testing.T, args ...string) *lockedBuffer {
	t.Helper()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, append([]string{"--log-format", "json", "--drain-timeout", "1s"}, args...), logs)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("portico log:\n%s", logs.String())
		}
	})
	return logs
}

// logLines are the JSON log lines of logs whose message is msg.
func logLines(logs *lockedBuffer, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// waitForLog waits until logs has n lines of msg.
func waitForLog(t *testing.T, logs *lockedBuffer, msg string, n int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	waitUntil(t, fmt.Sprintf("%d log lines %q", n, msg), func() error {
		if lines = logLines(logs, msg); len(lines) < n {
			return fmt.Errorf("%d lines", len(lines))
		}
		return nil
	})
	return lines
}

// serve in standalone mode names a GatewayClass of another controller in
// a warning, once, however many times the configuration is rebuilt.
func TestServeWarnsOfAnotherControllerName(t *testing.T) {
	dir := exampleWith(t, [3]string{"gateway.yaml", "controllerName: portico.dev/gateway-controller", "controllerName: example.com/gateway-controller"})
	logs := serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	const msg = "GatewayClass names another controller: Portico ignores it and its Gateways"
	warning := waitForLog(t, logs, msg, 1)[0]
	if warning["gatewayClass"] != "portico" || warning["controllerName"] != "example.com/gateway-controller" || warning["level"] != "warn" {
		t.Errorf("warning %v", warning)
	}
	// A second configuration: the warning is not repeated.
	if err := os.WriteFile(filepath.Join(dir, "more.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: more}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, logs, "config applied", 2)
	if n := len(logLines(logs, msg)); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

// exampleOnFreePorts is the bundled example with its listener ports and
// its backend's moved to free loopback ports: the directory, the HTTP and
// HTTPS ports, and the echo backend's address.
func exampleOnFreePorts(t *testing.T) (dir string, httpPort, httpsPort int, echoAddr string) {
	t.Helper()
	_, httpPort = freeport.Addr(t)
	_, httpsPort = freeport.Addr(t)
	echoAddr, echoPort := freeport.Addr(t)
	dir = exampleWith(t,
		[3]string{"gateway.yaml", "port: 8080", "port: " + strconv.Itoa(httpPort)},
		[3]string{"gateway.yaml", "port: 8443", "port: " + strconv.Itoa(httpsPort)},
		[3]string{"backend.yaml", "9180", strconv.Itoa(echoPort)})
	return dir, httpPort, httpsPort, echoAddr
}

// A --config path that does not exist ends serve at once, with one line.
func TestServeMissingConfigFailsFast(t *testing.T) {
	var out, errOut bytes.Buffer
	missing := filepath.Join(t.TempDir(), "nope")
	if code := run([]string{"serve", "--config", missing}, &out, &errOut); code != exitFailed {
		t.Errorf("exit %d", code)
	}
	if want := "portico serve: --config " + missing + ": no such file or directory\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}

// Start-up says where Portico listens: one line per bound port, with its
// address, protocol and listeners, not repeated by later rebuilds; and
// nothing of ACME's, which the example does not use.
func TestServeLogsListeningPerPort(t *testing.T) {
	dir, httpPort, httpsPort, echoAddr := exampleOnFreePorts(t)
	logs := serveInTest(t, "--config", dir, "--echo-backend", echoAddr, "--bind-address", "127.0.0.1")
	lines := waitForLog(t, logs, "listening", 2)
	want := map[string]string{
		fmt.Sprintf("127.0.0.1:%d HTTP", httpPort):   "Gateway/demo/web/http",
		fmt.Sprintf("127.0.0.1:%d HTTPS", httpsPort): "ListenerSet/demo/app/https,ListenerSet/demo/shop/https",
	}
	for _, l := range lines {
		key := fmt.Sprint(l["address"], " ", l["protocol"])
		var names []string
		for _, n := range l["listeners"].([]any) {
			names = append(names, n.(string))
		}
		if want[key] != strings.Join(names, ",") {
			t.Errorf("listening %s: listeners %v, want %s", key, names, want[key])
		}
		delete(want, key)
	}
	if len(want) != 0 {
		t.Errorf("no listening line for %v", want)
	}
	if err := os.WriteFile(filepath.Join(dir, "more.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: more}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, logs, "config applied", 2)
	if n := len(logLines(logs, "listening")); n != 2 {
		t.Errorf("%d listening lines after a second configuration, want 2", n)
	}
	if strings.Contains(logs.String(), "certificate maintenance") || strings.Contains(logs.String(), `"cache"`) {
		t.Errorf("ACME's cache logs though no listener uses ACME:\n%s", logs.String())
	}
}

// --fail-on-bind-error ends serve when a port of the first configuration
// cannot be bound; without it the other ports serve.
func TestServeFailOnBindError(t *testing.T) {
	dir, httpPort, _, _ := exampleOnFreePorts(t)
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	logs := &lockedBuffer{}
	err = serve(context.Background(), []string{"--config", dir, "--bind-address", "127.0.0.1", "--fail-on-bind-error", "--drain-timeout", "1s"}, logs)
	if err == nil || !strings.Contains(err.Error(), "--fail-on-bind-error") || !strings.Contains(err.Error(), strconv.Itoa(httpPort)) {
		t.Errorf("serve = %v, want the bind error of port %d", err, httpPort)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--fail-on-bind-error"}, &out, &errOut); code != exitFailed || !strings.Contains(errOut.String(), "standalone") {
		t.Errorf("--fail-on-bind-error without --config: exit %d, %s", code, errOut.String())
	}
}

// A port that cannot be bound is summarised once: one error for the
// generation, naming the port, and no "config applied" line for the
// steps in which the rest of it was applied; the other port serves.
func TestServeBindFailureLoggedOnce(t *testing.T) {
	dir, httpPort, httpsPort, echoAddr := exampleOnFreePorts(t)
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	logs := serveInTest(t, "--config", dir, "--echo-backend", echoAddr, "--bind-address", "127.0.0.1")
	failed := waitForLog(t, logs, "config not fully applied", 1)[0]
	if failed["level"] != "error" || !strings.Contains(fmt.Sprint(failed["error"]), strconv.Itoa(httpPort)) {
		t.Errorf("error line %v, want one naming port %d", failed, httpPort)
	}
	waitForLog(t, logs, "listening", 1)
	if n := len(logLines(logs, "config applied")); n != 0 {
		t.Errorf("%d \"config applied\" lines for a generation not fully applied, want 0:\n%s", n, logs.String())
	}
	// Retries come after 10 s: within this test the generation is logged once.
	if n := len(logLines(logs, "config not fully applied")); n != 1 {
		t.Errorf("%d error lines, want 1", n)
	}
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(httpsPort))
	if err != nil {
		t.Fatalf("the port that could be bound: %v", err)
	}
	conn.Close()
}

// A 404 says in the access log and the requests metric whether no
// listener serves the Host or no route matched.
func TestNotFoundSaysWhy(t *testing.T) {
	dir, _, httpsPort, echoAddr := exampleOnFreePorts(t)
	adminAddr, _ := freeport.Addr(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	serveInTest(t, "--config", dir, "--echo-backend", echoAddr, "--bind-address", "127.0.0.1", "--admin-address", adminAddr, "--access-log", accessLog)
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(filepath.Join(dir, "shop.example.com.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "shop.example.com"}}}
	get := func(host, path string) (int, error) {
		req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(httpsPort)+path, nil)
		if err != nil {
			return 0, err
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	waitUntil(t, "shop served", func() error {
		if code, err := get("shop.example.com", "/cart"); err != nil || code != 200 {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	// shop's route serves /cart only; no listener of the port serves other.example.
	for _, c := range []struct{ host, path string }{{"shop.example.com", "/nothing-here"}, {"other.example", "/cart"}} {
		if code, err := get(c.host, c.path); err != nil || code != 404 {
			t.Fatalf("%s%s: %d %v, want 404", c.host, c.path, code, err)
		}
	}
	waitUntil(t, "access log lines", func() error {
		raw, err := os.ReadFile(accessLog)
		if err != nil {
			return err
		}
		outcomes := map[string]string{}
		for line := range strings.Lines(string(raw)) {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil {
				outcomes[fmt.Sprint(e["host"], e["path"])] = fmt.Sprint(e["outcome"])
			}
		}
		if outcomes["shop.example.com/nothing-here"] != "no_route" || outcomes["other.example/cart"] != "no_listener" {
			return fmt.Errorf("outcomes %v", outcomes)
		}
		return nil
	})
	_, metrics, err := httpGet("http://"+adminAddr+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"no_route", "no_listener"} {
		if !regexp.MustCompile(`portico_http_requests_total\{[^}]*outcome="` + o + `"[^}]*\} 1\n`).MatchString(metrics) {
			t.Errorf("no request counted with outcome %q", o)
		}
	}
	// The requests shop's route sent to its backend, and only those.
	if !regexp.MustCompile(`portico_backend_requests_total\{backend="demo/echo:80",result="ok"\} [1-9]`).MatchString(metrics) {
		t.Errorf("no request to demo/echo:80 counted:\n%s", metrics)
	}
}
