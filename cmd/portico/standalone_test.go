package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
