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
		{[]string{"serve", "--config", dir, "--acme-eab-hmac-key", "k", "--acme-eab-hmac-key-file", notPEM}, "give one"},
		{[]string{"serve", "--config", dir, "--acme-eab-hmac-key-file", filepath.Join(dir, "missing")}, "--acme-eab-hmac-key-file"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// The HMAC key read from a file (a mounted Secret) is the key, without
// the file's line end.
func TestACMEHMACKeyFromFile(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "hmac")
	if err := os.WriteFile(keyFile, []byte("c2VjcmV0LWtleQ\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := parseServeFlags([]string{"--config", t.TempDir(), "--acme-eab-key-id", "kid", "--acme-eab-hmac-key-file", keyFile}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.acme.managerOptions(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.EABMACKey != "c2VjcmV0LWtleQ" || opts.EABKeyID != "kid" {
		t.Errorf("EAB key ID %q, HMAC key %q", opts.EABKeyID, opts.EABMACKey)
	}
}
