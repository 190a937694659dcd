package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestAccessLogFile: entries reach the file as JSON lines once the log is
// closed, appended to what the file held.
func TestAccessLogFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, []byte("{\"earlier\":true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, closeLog, err := newAccessLog(path)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("request", zap.String("host", "a.example.com"), zap.Int("status", 200))
	closeLog()

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &e); err != nil {
		t.Fatal(err)
	}
	if e["host"] != "a.example.com" || e["status"] != float64(200) || e["msg"] != "request" || e["ts"] == nil || e["level"] != nil {
		t.Errorf("entry %v", e)
	}

	if _, _, err := newAccessLog(filepath.Join(t.TempDir(), "missing", "access.log")); err == nil || !strings.Contains(err.Error(), "--access-log") {
		t.Errorf("unwritable path: %v", err)
	}
}
