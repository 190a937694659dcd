// Package acmetest runs a real ACME server for tests: Pebble and its DNS
// companion pebble-challtestsrv, built from the module pinned in
// hack/pebblebin (hack/pebble.sh) and started on loopback. Pebble validates
// HTTP-01 challenges for any name by resolving it through the companion,
// which answers 127.0.0.1, and connecting to the port the test chose.
package acmetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/proc"
	"portico.dev/portico/internal/testkit/snitest"
)

// buildScript builds Pebble and prints the directory that holds it.
const buildScript = "hack/pebble.sh"

// Options tunes Start. HTTPPort is required.
type Options struct {
	// HTTPPort is the port on 127.0.0.1 that Pebble connects to when it
	// validates an HTTP-01 challenge, in place of 80.
	HTTPPort int
	// EAB, when set, makes Pebble require External Account Binding and
	// accept these key IDs with their base64url-encoded HMAC keys.
	EAB map[string]string
	// BinDir holds pebble and pebble-challtestsrv. Empty: run
	// hack/pebble.sh, which builds them on first use.
	BinDir string
	// StartTimeout bounds how long both servers may take to become ready.
	// Zero means 30 seconds.
	StartTimeout time.Duration
	// CertificateValidity is the lifetime of the certificates Pebble
	// issues, in whole seconds; zero means Pebble's default (90 days). A
	// short one lets a test see renewals.
	CertificateValidity time.Duration
}

// Server is one running Pebble with its DNS server.
type Server struct {
	// DirectoryURL is the ACME directory, over HTTPS.
	DirectoryURL string
	// DirectoryRoots trusts the HTTPS certificate of DirectoryURL (not the
	// certificates Pebble issues): an ACME client's trusted roots.
	DirectoryRoots *x509.CertPool
	// RootPEM is the root that Pebble issues certificates under; Pebble
	// makes a new one at every start.
	RootPEM []byte
	// Roots holds RootPEM, for verifying issued certificates.
	Roots *x509.CertPool
	// DNSAddr is the DNS server (TCP and UDP) that Pebble resolves
	// identifiers with; every name resolves to 127.0.0.1 unless SetA says
	// otherwise.
	DNSAddr string
	// DNSManagementURL controls the DNS server (pebble-challtestsrv's
	// management API, plain HTTP).
	DNSManagementURL string
	// Dir holds the configuration and the logs (<process>.log). It is
	// removed by Stop unless the test failed.
	Dir string

	procs *proc.Group
}

// Start starts a Server for a test and stops it when the test ends. When the
// test fails, the last lines of both logs are printed and Dir is kept with
// the full logs.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	start := time.Now()
	s, err := StartServer(context.Background(), opts)
	if err != nil {
		t.Fatalf("acmetest: %v", err)
	}
	t.Logf("acmetest: pebble ready in %v at %s", time.Since(start).Round(time.Millisecond), s.DirectoryURL)
	s.procs.StopWhenDone(t, "acmetest", 8<<10)
	return s
}

// StartServer starts a Server outside of a test. The caller must call Stop.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	if opts.HTTPPort <= 0 || opts.HTTPPort > 65535 {
		return nil, fmt.Errorf("acmetest: HTTPPort %d is not a port", opts.HTTPPort)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.BinDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		if opts.BinDir, err = Binaries(ctx, root); err != nil {
			return nil, err
		}
	}
	return proc.RetryPortTaken(3, func() (*Server, error) { return startOnce(ctx, opts) })
}

func startOnce(ctx context.Context, opts Options) (_ *Server, err error) {
	dir, err := os.MkdirTemp("", "portico-acmetest-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	s := &Server{Dir: dir, procs: &proc.Group{Dir: dir}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, s.Logs(8<<10))
			_ = s.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	ports, err := freePorts(5)
	if err != nil {
		return s, err
	}
	a := pebbleAddrs{
		acme:      loopback(ports[0]),
		mgmt:      loopback(ports[1]),
		challMgmt: loopback(ports[3]),
		// Pebble needs a TLS-ALPN-01 port even though Portico only answers
		// HTTP-01; nothing listens there.
		tlsALPNPort: ports[4],
	}
	s.DNSAddr = loopback(ports[2])
	cfgFile, err := s.writePebbleConfig(opts, a)
	if err != nil {
		return s, err
	}
	if err := s.startChallengeServer(ctx, opts.BinDir, a.challMgmt); err != nil {
		return s, err
	}
	if err := s.startPebble(ctx, opts.BinDir, cfgFile, a); err != nil {
		return s, err
	}
	return s, nil
}

// pebbleAddrs are the loopback addresses Pebble and its challenge server
// listen on, besides the DNS server's.
type pebbleAddrs struct {
	acme, mgmt, challMgmt string
	tlsALPNPort           int
}

// writePebbleConfig writes Pebble's serving certificate and configuration to
// s.Dir, trusts the certificate in s.DirectoryRoots and returns the
// configuration's file.
func (s *Server) writePebbleConfig(opts Options, a pebbleAddrs) (string, error) {
	caPEM, certFile, keyFile, err := writeServingCert(s.Dir)
	if err != nil {
		return "", err
	}
	s.DirectoryRoots = x509.NewCertPool()
	s.DirectoryRoots.AppendCertsFromPEM(caPEM)

	cfgFile := filepath.Join(s.Dir, "pebble.json")
	if err := writeConfig(cfgFile, pebbleConfig{
		ListenAddress:                  a.acme,
		ManagementListenAddress:        a.mgmt,
		Certificate:                    certFile,
		PrivateKey:                     keyFile,
		HTTPPort:                       opts.HTTPPort,
		TLSPort:                        a.tlsALPNPort,
		ExternalAccountBindingRequired: len(opts.EAB) > 0,
		ExternalAccountMACKeys:         opts.EAB,
		KeyAlgorithm:                   "ecdsa",
		RetryAfter:                     retryAfter{Authz: 1, Order: 1},
		Profiles:                       profiles(opts.CertificateValidity),
	}); err != nil {
		return "", err
	}
	return cfgFile, nil
}

// startChallengeServer starts the DNS server Pebble resolves names with,
// managed at challMgmtAddr, and waits until it answers.
func (s *Server) startChallengeServer(ctx context.Context, binDir, challMgmtAddr string) error {
	s.DNSManagementURL = "http://" + challMgmtAddr
	chall, err := s.start(binDir, "pebble-challtestsrv", nil,
		"-dnsserver", s.DNSAddr,
		"-management", challMgmtAddr,
		"-defaultIPv4", "127.0.0.1",
		// Without AAAA answers Pebble dials 127.0.0.1, where the test listens.
		"-defaultIPv6", "",
		"-http01", "", "-https01", "", "-doh", "", "-tlsalpn01", "",
	)
	if err != nil {
		return err
	}
	return proc.WaitReady(ctx, chall, 50*time.Millisecond, func(ctx context.Context) error { return dial(ctx, s.DNSAddr) })
}

// startPebble starts Pebble with cfgFile, waits until its directory
// answers and fetches the root it issues under into s.RootPEM and s.Roots.
func (s *Server) startPebble(ctx context.Context, binDir, cfgFile string, a pebbleAddrs) error {
	pebble, err := s.start(binDir, "pebble", []string{
		// Validate at once, with real requests, and never reject a nonce:
		// a test waits for nothing but Portico.
		"PEBBLE_VA_NOSLEEP=1",
		"PEBBLE_VA_ALWAYS_VALID=0",
		"PEBBLE_WFE_NONCEREJECT=0",
	}, "-config", cfgFile, "-dnsserver", s.DNSAddr)
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.DirectoryRoots}},
		Timeout:   5 * time.Second,
	}
	defer client.CloseIdleConnections()
	s.DirectoryURL = "https://" + a.acme + "/dir"
	if err := proc.WaitReady(ctx, pebble, 50*time.Millisecond, func(ctx context.Context) error {
		_, err := get(ctx, client, s.DirectoryURL)
		return err
	}); err != nil {
		return err
	}
	if s.RootPEM, err = get(ctx, client, "https://"+a.mgmt+"/roots/0"); err != nil {
		return fmt.Errorf("pebble root: %w", err)
	}
	s.Roots = x509.NewCertPool()
	if !s.Roots.AppendCertsFromPEM(s.RootPEM) {
		return fmt.Errorf("pebble root: no certificate in %q", s.RootPEM)
	}
	return nil
}

// SetA makes host resolve to addrs (IPv4) instead of 127.0.0.1, e.g. to an
// address where nothing answers, so that validation fails. No addrs restores
// the default.
func (s *Server) SetA(ctx context.Context, host string, addrs ...string) error {
	path, body := "/add-a", map[string]any{"host": host, "addresses": addrs}
	if len(addrs) == 0 {
		path, body = "/clear-a", map[string]any{"host": host}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("set A %s: %w", host, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.DNSManagementURL+path, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("set A %s: %w", host, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set A %s: %w", host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("set A %s: %s: %s", host, resp.Status, msg)
	}
	return nil
}

// Logs returns the tail (at most limit bytes each) of both process logs.
func (s *Server) Logs(limit int64) string {
	return s.procs.Logs(limit)
}

// Stop kills both processes and removes Dir unless a failed test asked to
// keep it. It is safe to call more than once.
func (s *Server) Stop() error {
	return s.procs.Stop()
}

func (s *Server) start(binDir, name string, env []string, args ...string) (*proc.Proc, error) {
	return s.procs.Start(name, filepath.Join(binDir, name), env, args...)
}

// RepoRoot finds the root of the Portico repository by walking up from the
// working directory, which for a test is its package directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repo root: no %s above the working directory", buildScript)
		}
		dir = parent
	}
}

// Binaries makes sure pebble and pebble-challtestsrv are built and returns
// the directory that holds them. The first call on a machine builds them
// (seconds); later calls find them in the cache.
func Binaries(ctx context.Context, repoRoot string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, buildScript))
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", buildScript, err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	if dir == "" {
		return "", errors.New(buildScript + " printed no directory")
	}
	return dir, nil
}

// pebbleConfig is the part of Pebble's configuration file that tests set.
type pebbleConfig struct {
	ListenAddress                  string             `json:"listenAddress"`
	ManagementListenAddress        string             `json:"managementListenAddress"`
	Certificate                    string             `json:"certificate"`
	PrivateKey                     string             `json:"privateKey"`
	HTTPPort                       int                `json:"httpPort"`
	TLSPort                        int                `json:"tlsPort"`
	ExternalAccountBindingRequired bool               `json:"externalAccountBindingRequired"`
	ExternalAccountMACKeys         map[string]string  `json:"externalAccountMACKeys,omitempty"`
	KeyAlgorithm                   string             `json:"keyAlgorithm"`
	RetryAfter                     retryAfter         `json:"retryAfter"`
	Profiles                       map[string]profile `json:"profiles,omitempty"`
}

type profile struct {
	Description    string `json:"description"`
	ValidityPeriod uint64 `json:"validityPeriod"`
}

// profiles is Pebble's profile list for a certificate lifetime: only the
// default profile, which orders without a profile get.
func profiles(validity time.Duration) map[string]profile {
	if validity <= 0 {
		return nil
	}
	return map[string]profile{"default": {Description: "short-lived", ValidityPeriod: uint64(validity / time.Second)}}
}

type retryAfter struct {
	Authz int `json:"authz"`
	Order int `json:"order"`
}

func writeConfig(path string, c pebbleConfig) error {
	b, err := json.MarshalIndent(map[string]pebbleConfig{"pebble": c}, "", "  ")
	if err != nil {
		return fmt.Errorf("pebble config: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("pebble config: %w", err)
	}
	return nil
}

// writeServingCert makes a throwaway CA and, under it, the certificate that
// Pebble serves its ACME and management APIs with on loopback. It returns
// the CA in PEM and the paths of the serving certificate and key.
func writeServingCert(dir string) (caPEM []byte, certFile, keyFile string, err error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, "", "", err
	}
	kp, err := ca.IssueLoopback(2, "localhost")
	if err != nil {
		return nil, "", "", fmt.Errorf("serving certificate: %w", err)
	}
	certFile = filepath.Join(dir, "pebble.crt")
	keyFile = filepath.Join(dir, "pebble.key")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		return nil, "", "", fmt.Errorf("serving certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return nil, "", "", fmt.Errorf("serving key: %w", err)
	}
	return ca.CertPEM, certFile, keyFile, nil
}

func dial(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

func loopback(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All listeners are held until every port is picked so that none repeats.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
