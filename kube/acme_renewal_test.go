package kube

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// leafFor completes a handshake for host at addr and returns the leaf the
// server sent, verified against roots.
func leafFor(addr, host string, roots *x509.CertPool) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// roundTrip sends one HTTP/1.1 request on an open connection and returns
// the response status.
func roundTrip(conn net.Conn, r *bufio.Reader, host string) (int, error) {
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, fmt.Errorf("response: %w", err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).WriteTo(discard{}); err != nil {
		return 0, fmt.Errorf("body: %w", err)
	}
	return resp.StatusCode, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestStandaloneACMERenews has Pebble issue certificates valid for 40
// seconds, renewed in the second half of their lifetime: the renewed
// certificate (another serial) serves at the next handshake before the
// first expires, a connection opened under the first one keeps serving
// requests after the rotation, and the renewal is counted once.
func TestStandaloneACMERenews(t *testing.T) {
	const host = "app.portico.test"
	const validity = 40 * time.Second
	ports := map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: ports["HTTP"], CertificateValidity: validity})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(render(t, acmeStandaloneTmpl, ports)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startACMEStandalone(t, dir, pebble, &certmagic.FileStorage{Path: t.TempDir()}, func(o *acme.Options) {
		o.RenewalWindowRatio = 0.5
		o.RenewCheckInterval = time.Second
		// Pebble suggests renewing anywhere in a short certificate's
		// lifetime: the renewal time would be random.
		o.DisableARI = true
	})
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(ports["HTTPS"]))

	var first *x509.Certificate
	kubetest.WaitFor(t, 30*time.Second, "first certificate for "+host, func() (err error) {
		first, err = leafFor(addr, host, pebble.Roots)
		return err
	})
	if life := first.NotAfter.Sub(first.NotBefore); life > validity || life < validity-2*time.Second {
		t.Fatalf("certificate valid for %v, want about %v: Pebble ignored the validity", life, validity)
	}
	if n := a.events.get("renewed"); n != 0 {
		t.Fatalf("%d renewals before the renewal window", n)
	}

	// Opened under the first certificate, used before and after renewal.
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: host, RootCAs: pebble.Roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	before, err := roundTrip(conn, br, host)
	if err != nil {
		t.Fatalf("request before renewal: %v", err)
	}

	var second *x509.Certificate
	kubetest.WaitFor(t, validity, "renewed certificate for "+host, func() error {
		leaf, err := leafFor(addr, host, pebble.Roots)
		if err != nil {
			return err
		}
		if leaf.SerialNumber.Cmp(first.SerialNumber) == 0 {
			return fmt.Errorf("still serial %x", first.SerialNumber)
		}
		second = leaf
		return nil
	})
	renewedAt := time.Now()
	t.Logf("first certificate issued at %s (valid %v); renewed one served %v after issuance, %v before the first expires",
		first.NotBefore.Format(time.TimeOnly), first.NotAfter.Sub(first.NotBefore).Round(time.Second),
		renewedAt.Sub(first.NotBefore).Round(100*time.Millisecond), first.NotAfter.Sub(renewedAt).Round(100*time.Millisecond))
	if !renewedAt.Before(first.NotAfter) {
		t.Errorf("renewed certificate served only at %s, after the first expired at %s", renewedAt, first.NotAfter)
	}
	if second.NotBefore.Before(first.NotBefore) {
		t.Errorf("renewed certificate not before %s is older than the first's %s", second.NotBefore, first.NotBefore)
	}

	after, err := roundTrip(conn, br, host)
	if err != nil {
		t.Fatalf("request on the connection opened before renewal: %v", err)
	}
	if after != before {
		t.Errorf("status %d on the old connection after renewal, %d before", after, before)
	}
	if state := conn.ConnectionState(); state.PeerCertificates[0].SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Error("the old connection changed certificate")
	}
	if n := a.events.get("renewed"); n != 1 {
		t.Errorf("%d renewals counted, want 1", n)
	}
	if n := a.events.get("obtained"); n != 1 {
		t.Errorf("%d orders counted, want 1", n)
	}
}
