package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadSessionKey: 64 hex digits (a trailing newline allowed) give
// the key; anything else is refused with the flag's name.
func TestReadSessionKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, err := readSessionKey(write("good", strings.Repeat("0a", 32)+"\n"))
	if err != nil || len(key) != 32 || key[0] != 0x0a {
		t.Fatalf("good key: %x, %v", key, err)
	}
	for name, s := range map[string]string{"short": strings.Repeat("0a", 16), "not-hex": strings.Repeat("zz", 32), "raw": strings.Repeat("k", 32)} {
		if _, err := readSessionKey(write(name, s)); err == nil || !strings.Contains(err.Error(), "--session-key-file") {
			t.Errorf("%s: %v, want a refusal naming the flag", name, err)
		}
	}
	if _, err := readSessionKey(filepath.Join(dir, "absent")); err == nil {
		t.Error("absent file accepted")
	}
}
