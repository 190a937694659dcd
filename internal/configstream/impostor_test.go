package configstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestSourceRefusesImpostorHub: a pod of the cluster that answers on the
// controller's address (a hijacked Service, a spoofed DNS answer) with a
// certificate of its own, even one valid for that address, gets neither a
// data plane's token (it is sent only once the server is verified) nor a
// chance to feed it a configuration.
func TestSourceRefusesImpostorHub(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"example.com"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(`{"version":"forged","resources":{}}` + "\n"))
	}))
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	impostor.StartTLS()
	defer impostor.Close()
	// The data plane trusts the real hub's certificate only.
	_, roots := hubServer(t, NewHub(testAuth, zaptest.NewLogger(t)), "127.0.0.1:0")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("web-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &Source{Gateway: web, Controller: impostor.Listener.Addr().String(), TokenFile: tokenFile, RootCAs: roots, Log: zaptest.NewLogger(t)}
	received, err := src.stream(context.Background(), func() {})
	if err == nil || received {
		t.Fatalf("stream from an impostor: received %v, err %v", received, err)
	}
	if _, err := src.askChallenge(context.Background(), "a.example.com", "tok"); err == nil {
		t.Error("a challenge answer was taken from an impostor")
	}
	if err := src.postAck(Ack{Gateway: web.String(), Version: "0123456789abcdef01234567"}); err == nil {
		t.Error("an acknowledgement was delivered to an impostor")
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the impostor received %d requests (with the token)", n)
	}
	if s, err := src.Snapshot(); err == nil {
		t.Errorf("a configuration was taken from the impostor: %v", s)
	}
}
