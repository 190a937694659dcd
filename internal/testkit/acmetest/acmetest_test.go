package acmetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	s := Start(t, Options{HTTPPort: 5002})

	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.DirectoryRoots}},
		Timeout:   5 * time.Second,
	}
	defer client.CloseIdleConnections()
	body, err := get(context.Background(), client, s.DirectoryURL)
	if err != nil {
		t.Fatal(err)
	}
	var dir map[string]any
	if err := json.Unmarshal(body, &dir); err != nil {
		t.Fatalf("directory: %v\n%s", err, body)
	}
	for _, k := range []string{"newAccount", "newNonce", "newOrder"} {
		if _, ok := dir[k].(string); !ok {
			t.Errorf("directory has no %q: %s", k, body)
		}
	}

	block, _ := pem.Decode(s.RootPEM)
	if block == nil {
		t.Fatalf("root is not PEM: %q", s.RootPEM)
	}
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !root.IsCA {
		t.Errorf("root %q is not a CA", root.Subject)
	}

	// Any name resolves to loopback over the DNS server Pebble uses, so an
	// HTTP-01 validation reaches the test's own listener.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", s.DNSAddr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, "app.portico.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0] != "127.0.0.1" {
		t.Errorf("app.portico.test resolves to %v, want [127.0.0.1]", addrs)
	}

	if err := s.SetA(ctx, "down.portico.test", "127.0.0.2"); err != nil {
		t.Fatal(err)
	}
	if addrs, err := r.LookupHost(ctx, "down.portico.test"); err != nil || len(addrs) != 1 || addrs[0] != "127.0.0.2" {
		t.Errorf("after SetA, down.portico.test resolves to %v, %v; want [127.0.0.2]", addrs, err)
	}
	if err := s.SetA(ctx, "down.portico.test"); err != nil {
		t.Fatal(err)
	}
	if addrs, err := r.LookupHost(ctx, "down.portico.test"); err != nil || len(addrs) != 1 || addrs[0] != "127.0.0.1" {
		t.Errorf("after clearing, down.portico.test resolves to %v, %v; want [127.0.0.1]", addrs, err)
	}
}

func TestStartRejectsMissingPort(t *testing.T) {
	if _, err := StartServer(context.Background(), Options{}); err == nil {
		t.Fatal("StartServer without HTTPPort succeeded")
	}
}
