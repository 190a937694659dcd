package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeRefusesBadACMEFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--data-dir", dir}, "--data-dir is for standalone mode"},
		{[]string{"serve", "--config", dir, "--acme-ca-bundle", notPEM}, "--acme-ca-bundle: no PEM certificate"},
		{[]string{"serve", "--config", dir, "--acme-ca-bundle", filepath.Join(dir, "missing.pem")}, "--acme-ca-bundle"},
		{[]string{"serve", "--config", dir, "--acme-eab-key-id", "kid"}, "External Account Binding needs both"},
		{[]string{"serve", "--config", dir, "--acme-concurrency", "0"}, "--acme-concurrency must be at least 1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
